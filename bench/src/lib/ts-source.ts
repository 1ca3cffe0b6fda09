// Loaded with `--import` by a bench child that imports the packages' TypeScript sources directly
// (the `spawn` child, for the local backend's own bubblewrap flags): their relative imports name
// `.js` files, as the compiler wants, which this maps to the `.ts` file beside each.
import { existsSync } from "node:fs";
import { registerHooks } from "node:module";
import { fileURLToPath } from "node:url";

registerHooks({
  resolve(specifier, context, nextResolve) {
    const parent = context.parentURL;
    if (specifier.startsWith(".") && specifier.endsWith(".js") && parent?.endsWith(".ts")) {
      const source = new URL(`${specifier.slice(0, -3)}.ts`, parent);
      if (existsSync(fileURLToPath(source))) return nextResolve(source.href, context);
    }
    return nextResolve(specifier, context);
  },
});

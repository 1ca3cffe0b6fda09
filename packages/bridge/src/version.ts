import { version } from "../package.json";

/** Version of this package, reported by `/health` unless the host names another. */
export const BRIDGE_VERSION: string = version;

/**
 * The sandbox's working directory, fresh and empty for each call, on every backend. A module of
 * its own, importing nothing, so the benchmark's bare bubblewrap side can load the local
 * backend's flags (local/bwrap.ts) from source without the rest of the bridge.
 */
export const SANDBOX_WORKSPACE = "/workspace";

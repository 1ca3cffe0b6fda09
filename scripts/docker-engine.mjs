#!/usr/bin/env node
/**
 * The container engine the docker backend's tests and bench use: Podman's Docker-compatible API
 * on a unix socket, with storage of its own (nothing else on the machine is touched), and a small
 * test image built locally from Debian's static busybox and bash, with the host's curl and its
 * libraries and the host's CA bundle (no registry is needed).
 *
 *   node scripts/docker-engine.mjs ensure   start it unless it answers already, build the image
 *                                           if missing; prints {"host": ..., "image": ...,
 *                                           "ulimits": ...} on stdout, and on stderr the
 *                                           --docker-ulimit the containers need
 *   node scripts/docker-engine.mjs stop     stop the service this script started
 *
 * State lives in $REMOTE_TASK_ENGINE_DIR (default /tmp/remote-task-engine). The service exits by
 * itself after ten idle minutes. On a cgroup v1/v2 hybrid `crun` refuses to start containers, so
 * the engine's runtime is `runc` when it is installed (a containers.conf given with
 * CONTAINERS_CONF). Where the engine runs without CAP_SYS_RESOURCE, Podman's default
 * process-count rlimit for a container exceeds the service's own hard limit and the start fails:
 * containers.conf gets that limit (what `podman run` uses), and `ensure` says what an API client
 * such as the docker backend must pass (`--docker-ulimit nproc=N`), as Podman's API ignores it. Several test processes may call `ensure` at once: a lock file serialises them.
 */

import { execFileSync, spawn, spawnSync } from "node:child_process";
import {
  closeSync,
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  openSync,
  readFileSync,
  readlinkSync,
  realpathSync,
  rmSync,
  statSync,
  symlinkSync,
  writeFileSync,
} from "node:fs";
import { request } from "node:http";
import { dirname, join } from "node:path";

export const TEST_IMAGE = "localhost/remote-task-test:latest";
/** What the image is made of; an image of another version is built again. */
const IMAGE_VERSION = "2";
const VERSION_LABEL = "remote-task.test-image";
const dir = process.env.REMOTE_TASK_ENGINE_DIR ?? "/tmp/remote-task-engine";
const socket = join(dir, "engine.sock");
const host = `unix://${socket}`;
const IDLE_SECONDS = 600;

function fail(message) {
  process.stderr.write(`docker-engine: ${message}\n`);
  process.exit(1);
}

function which(name) {
  for (const d of (process.env.PATH ?? "/usr/bin:/bin").split(":").concat(["/usr/sbin", "/sbin"])) {
    const path = join(d, name);
    if (existsSync(path)) return path;
  }
  return undefined;
}

function podmanEnv() {
  return { ...process.env, CONTAINERS_CONF: join(dir, "containers.conf") };
}

function podman(args, options = {}) {
  return spawnSync(
    "podman",
    ["--root", join(dir, "root"), "--runroot", join(dir, "run"), ...args],
    {
      env: podmanEnv(),
      encoding: "utf8",
      ...options,
    },
  );
}

function ping() {
  return new Promise((resolve) => {
    const req = request({ socketPath: socket, path: "/_ping", timeout: 2000 }, (res) => {
      res.resume();
      resolve(res.statusCode === 200);
    });
    req.on("error", () => resolve(false));
    req.on("timeout", () => req.destroy());
    req.end();
  });
}

async function withLock(body) {
  mkdirSync(dir, { recursive: true });
  const lock = join(dir, "lock");
  const deadline = Date.now() + 120_000;
  let fd;
  for (;;) {
    try {
      fd = openSync(lock, "wx");
      break;
    } catch (error) {
      if (error.code !== "EEXIST") throw error;
      // A lock older than two minutes was left by a process that died holding it.
      try {
        if (Date.now() - statSync(lock).mtimeMs > 120_000) rmSync(lock, { force: true });
      } catch {}
      if (Date.now() > deadline) fail(`timed out waiting for ${lock}`);
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
  }
  try {
    return await body();
  } finally {
    closeSync(fd);
    rmSync(lock, { force: true });
  }
}

/**
 * Stops a service whose working directory was deleted (one started from a checkout removed
 * since): it still answers, but conmon cannot start a container without that directory.
 */
async function stopStaleService() {
  let pid;
  try {
    pid = Number(readFileSync(join(dir, "service.pid"), "utf8"));
    if (!readlinkSync(`/proc/${pid}/cwd`).endsWith(" (deleted)")) return;
    process.kill(pid);
  } catch {
    return;
  }
  const deadline = Date.now() + 10_000;
  while ((await ping()) && Date.now() < deadline) {
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

async function startService() {
  await stopStaleService();
  if (await ping()) return;
  if (!which("podman")) fail("podman is not installed (apt-get install podman runc)");
  // Podman raises a container's process-count rlimit to its default, which fails (EPERM) where
  // the service's own hard limit is lower: keep that hard limit. The service may run with a
  // lower one than this shell's (Podman sets its own), so the value is the one it really runs
  // with: when it differs from what was written, the service just started is started again.
  const nproc = execFileSync("bash", ["-c", "ulimit -Hu"], { encoding: "utf8" }).trim();
  const pid = await launchService(/^\d+$/.test(nproc) ? Number(nproc) : undefined);
  const actual = engineUlimits().nproc;
  if (actual !== undefined && String(actual) !== nproc) {
    process.kill(pid);
    const deadline = Date.now() + 10_000;
    while ((await ping()) && Date.now() < deadline) {
      await new Promise((resolve) => setTimeout(resolve, 100));
    }
    await launchService(actual);
  }
}

/** Writes containers.conf with `nproc` and starts the service; resolves with its pid once it answers. */
async function launchService(nproc) {
  const runtime = which("runc") ? 'runtime = "runc"\n' : "";
  const ulimits = nproc === undefined ? "" : `default_ulimits = ["nproc=${nproc}:${nproc}"]\n`;
  // An exec session's conmon stays 5 minutes after the command by default (Docker's exec cleanup),
  // about 2.6 MB each; the Worker harness runs execs for every call (apps/worker/test/harness).
  const execCleanup = "exit_command_delay = 5\n";
  writeFileSync(
    join(dir, "containers.conf"),
    `[containers]\n${ulimits}\n[engine]\n${runtime}${execCleanup}`,
  );
  rmSync(socket, { force: true });
  const log = openSync(join(dir, "service.log"), "a");
  const child = spawn(
    "podman",
    [
      "--root",
      join(dir, "root"),
      "--runroot",
      join(dir, "run"),
      "system",
      "service",
      `--time=${IDLE_SECONDS}`,
      host,
    ],
    // In its own directory: a service started in a checkout breaks when the checkout is removed.
    { cwd: dir, env: podmanEnv(), detached: true, stdio: ["ignore", log, log] },
  );
  child.unref();
  closeSync(log);
  writeFileSync(join(dir, "service.pid"), String(child.pid));
  const deadline = Date.now() + 30_000;
  while (!(await ping())) {
    if (Date.now() > deadline) {
      fail(`the engine did not answer on ${socket}; see ${join(dir, "service.log")}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  return child.pid;
}

/** Copies `program` and the shared libraries it loads (as `ldd` lists them) into `root`. */
function copyWithLibraries(root, program) {
  const libraries = execFileSync("ldd", [program], { encoding: "utf8" })
    .split("\n")
    .map((line) => /(\/\S+) \(0x/.exec(line)?.[1])
    .filter((path) => path !== undefined);
  for (const path of [program, ...libraries]) {
    mkdirSync(join(root, dirname(path)), { recursive: true });
    copyFileSync(path, join(root, path));
  }
}

/** The version label of the test image, or undefined when there is none. */
function imageVersion() {
  const result = podman([
    "image",
    "inspect",
    "--format",
    `{{index .Labels "${VERSION_LABEL}"}}`,
    TEST_IMAGE,
  ]);
  return result.status === 0 ? String(result.stdout).trim() : undefined;
}

/**
 * A root filesystem of static busybox (the coreutils) and static bash, with curl (dynamically
 * linked: copied with its libraries, for tests that need a client that verifies TLS) and the
 * host's CA bundle, imported as an image.
 */
function buildImage() {
  if (imageVersion() === IMAGE_VERSION) return;
  const busybox = ["/bin/busybox", "/usr/bin/busybox"].find((p) => existsSync(p));
  const bash = ["/bin/bash-static", "/usr/bin/bash-static"].find((p) => existsSync(p));
  if (busybox === undefined || bash === undefined) {
    fail(
      "busybox-static and bash-static are needed for the test image (apt-get install busybox-static bash-static)",
    );
  }
  const work = mkdtempSync(join(dir, "image-"));
  try {
    const root = join(work, "rootfs");
    for (const d of ["bin", "etc", "tmp", "workspace", "proc", "dev", "sys", "usr/bin"]) {
      mkdirSync(join(root, d), { recursive: true });
    }
    copyFileSync(busybox, join(root, "bin/busybox"));
    copyFileSync(bash, join(root, "bin/bash"));
    const applets = execFileSync(busybox, ["--list"], { encoding: "utf8" }).split("\n");
    for (const applet of applets) {
      if (applet !== "" && !existsSync(join(root, "bin", applet))) {
        symlinkSync("busybox", join(root, "bin", applet));
      }
    }
    // bash is the shell, as on the Worker's image.
    rmSync(join(root, "bin/sh"), { force: true });
    symlinkSync("bash", join(root, "bin/sh"));
    writeFileSync(
      join(root, "etc/passwd"),
      "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n",
    );
    writeFileSync(join(root, "etc/group"), "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n");
    const curl = which("curl");
    if (curl === undefined) fail("curl is needed for the test image (apt-get install curl)");
    copyWithLibraries(root, realpathSync(curl));
    if (realpathSync(curl) !== "/usr/bin/curl")
      symlinkSync(realpathSync(curl), join(root, "usr/bin/curl"));
    const bundle = "/etc/ssl/certs/ca-certificates.crt";
    if (existsSync(bundle)) {
      mkdirSync(join(root, "etc/ssl/certs"), { recursive: true });
      copyFileSync(bundle, join(root, bundle));
    }
    const tar = join(work, "rootfs.tar");
    execFileSync("tar", ["-C", root, "-cf", tar, "."]);
    const result = podman([
      "import",
      "--change",
      "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
      "--change",
      `LABEL ${VERSION_LABEL}=${IMAGE_VERSION}`,
      tar,
      TEST_IMAGE,
    ]);
    if (result.status !== 0) fail(`podman import failed: ${result.stderr}`);
  } finally {
    rmSync(work, { recursive: true, force: true });
  }
}

async function ensure() {
  await withLock(async () => {
    await startService();
    buildImage();
  });
  const ulimits = engineUlimits();
  process.stdout.write(`${JSON.stringify({ host, image: TEST_IMAGE, ulimits, dir })}\n`);
  if (ulimits.nproc !== undefined) {
    process.stderr.write(
      `docker-engine: containers on this engine need --docker-ulimit nproc=${ulimits.nproc} (the docker backend's ulimits: { nproc: ${ulimits.nproc} }), the service's own hard limit: e.g. DOCKER_HOST=${host} remote-task run --docker ${TEST_IMAGE} --docker-ulimit nproc=${ulimits.nproc} -- uname -a\n`,
    );
  }
}

/**
 * What a backend must ask for on this engine: the service's own hard process-count limit (see
 * startService), read from the running service.
 */
function engineUlimits() {
  try {
    const pid = Number(readFileSync(join(dir, "service.pid"), "utf8"));
    const line = readFileSync(`/proc/${pid}/limits`, "utf8")
      .split("\n")
      .find((l) => l.startsWith("Max processes"));
    const hard = line?.split(/\s{2,}/)[2];
    return hard !== undefined && /^\d+$/.test(hard) ? { nproc: Number(hard) } : {};
  } catch {
    return {};
  }
}

function stop() {
  const pidFile = join(dir, "service.pid");
  if (!existsSync(pidFile)) return;
  const pid = Number(readFileSync(pidFile, "utf8"));
  try {
    process.kill(pid, "SIGTERM");
  } catch {}
  rmSync(pidFile, { force: true });
}

const command = process.argv[2];
if (command === "ensure") await ensure();
else if (command === "stop") stop();
else fail("usage: docker-engine.mjs ensure|stop");

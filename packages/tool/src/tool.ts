import {
  AbortError,
  AuthenticationError,
  BridgeError,
  CapacityError,
  clientFromEnv,
  ForbiddenError,
  InvalidRequestError,
  isConfigured,
  type RemoteTaskClient,
  RemoteTaskError,
  TimeoutError,
} from "@remote-task/client";
import { issuesOf, type SchemaIssue } from "@remote-task/internal";
import {
  DEFAULT_TIMEOUT_SECONDS,
  type NetworkPolicy,
  networkPolicySchema,
  secretNameSchema,
} from "@remote-task/protocol";
import {
  REMOTE_TASK_TOOL_NAME,
  REMOTE_TASK_TOOL_TITLE,
  remoteTaskDescription,
} from "./description.js";
import {
  abortedResult,
  clientTimeoutResult,
  errorResult,
  type RemoteTaskToolResult,
  resultFromTask,
} from "./result.js";
import {
  type JsonSchemaObject,
  type RemoteTaskParametersSchema,
  remoteTaskJsonSchema,
  remoteTaskParameters,
} from "./schema.js";

/** Environment variables as `process.env` holds them. */
export type EnvLike = Readonly<Record<string, string | undefined>>;

/** The part of a client the tool uses; any `RemoteTaskClient` fits. */
export type RemoteTaskToolClient = Pick<RemoteTaskClient, "run"> &
  Partial<Pick<RemoteTaskClient, "close">>;

interface CommonToolOptions {
  /** Timeout in seconds when the model names none (default 120). */
  defaultTimeoutSeconds?: number | undefined;
  /** Replaces the description the model reads. */
  description?: string | undefined;
  /**
   * Where every call's command may connect: `"none"`, `"open"` or `{allow: [host patterns]}`
   * (default: the bridge's default). Sent on every call; the model's arguments cannot change it.
   */
  network?: NetworkPolicy | undefined;
  /**
   * Names of secrets the model may ask for, among those the bridge declares (its `/health` lists
   * them; `remote-task serve --secret` declares them). The model gets an optional `secrets`
   * parameter, an enum of exactly these names, and the description names them; a call asks only
   * for those the model lists, and its command sees a placeholder under each name, never the
   * value. Without it (or empty) the parameters are `{command, timeout?}` as before.
   */
  secrets?: readonly string[] | undefined;
}

/**
 * Where the tool gets its client: an injected `client` (the caller owns and closes it), or `env`
 * (`CLOUDFLARE_SANDBOX_URL`, `CLOUDFLARE_SANDBOX_TOKEN`, `CLOUDFLARE_SANDBOX_CWD`, or their `MIKAN_`
 * forms; default `process.env`), from which the tool creates and owns one on first use.
 */
export type RemoteTaskToolOptions = CommonToolOptions &
  (
    | { client: RemoteTaskToolClient; env?: undefined }
    | { client?: undefined; env?: EnvLike | undefined }
  );

export interface ExecuteOptions {
  /** Aborting stops the remote command and ends the call with an `aborted` result. */
  signal?: AbortSignal | undefined;
}

/** The framework-neutral `remote_task` tool. Adapters wrap exactly this. */
export interface RemoteTaskTool {
  readonly name: typeof REMOTE_TASK_TOOL_NAME;
  readonly title: string;
  readonly description: string;
  /** zod schema of the arguments: `{command: string, timeout?: number, secrets?: names[]}`. */
  readonly parameters: RemoteTaskParametersSchema;
  /** The same schema as JSON Schema (what a model is shown). */
  readonly jsonSchema: JsonSchemaObject;
  readonly defaultTimeoutSeconds: number;
  /**
   * Runs one call. Never throws: invalid arguments, configuration and bridge failures, timeouts,
   * non-zero exits and aborts all come back as results with `isError: true`.
   */
  execute(args: unknown, options?: ExecuteOptions): Promise<RemoteTaskToolResult>;
  /** Closes the client the tool created from `env` (an injected client is left open). */
  close(): Promise<void>;
}

function defaultEnv(): EnvLike {
  return typeof process === "undefined" ? {} : process.env;
}

/** The protocol's field is `timeoutSeconds`; the model's parameter is `timeout`. */
function modelWords(text: string): string {
  return text.replaceAll("timeoutSeconds", "timeout");
}

/** What a call looks like, for the invalid-arguments text. */
function argumentsForm(secrets: readonly string[]): string {
  const names = secrets.map((name) => JSON.stringify(name)).join(", ");
  return secrets.length === 0
    ? `{"command": "<shell command>", "timeout": <seconds, optional>}`
    : `{"command": "<shell command>", "timeout": <seconds, optional>, "secrets": <some of [${names}], optional>}`;
}

function describeIssues(
  error: { issues: ReadonlyArray<SchemaIssue> },
  secrets: readonly string[],
): string {
  const lines = issuesOf(error).map((issue) => {
    const path = issue.path.join(".");
    const message = modelWords(issue.message);
    // "timeout must be greater than 0", not "timeout: timeout must be greater than 0".
    return path && !message.startsWith(path) ? `${path}: ${message}` : message;
  });
  return `Invalid ${REMOTE_TASK_TOOL_NAME} arguments: ${lines.join("; ")}. Pass ${argumentsForm(secrets)}.`;
}

/**
 * The integrator's secret names, checked: each a name a bridge can declare (as an environment
 * variable's), none twice.
 */
function checkedSecrets(secrets: readonly string[] | undefined): readonly string[] {
  if (secrets === undefined) return [];
  if (!Array.isArray(secrets)) {
    throw new TypeError(`secrets must be an array of secret names; got ${JSON.stringify(secrets)}`);
  }
  for (const name of secrets) {
    if (!secretNameSchema.safeParse(name).success) {
      throw new TypeError(
        `secrets: ${JSON.stringify(name)} is not a secret name ([A-Za-z_][A-Za-z0-9_]*, as the bridge declares it)`,
      );
    }
  }
  const twice = secrets.find((name, index) => secrets.indexOf(name) !== index);
  if (twice !== undefined) throw new TypeError(`secrets: ${twice} is given twice`);
  return [...secrets];
}

/**
 * Secrets the model asked for on a tool that offers none: a call that runs without them would
 * fail in a way the model cannot explain, so it is refused. Undefined when there is nothing to
 * refuse (no such argument, or an empty list).
 */
function unofferedSecrets(args: unknown): string | undefined {
  if (typeof args !== "object" || args === null || !("secrets" in args)) return undefined;
  const asked = (args as { secrets: unknown }).secrets;
  if (asked === undefined || asked === null || (Array.isArray(asked) && asked.length === 0)) {
    return undefined;
  }
  return `Invalid ${REMOTE_TASK_TOOL_NAME} arguments: secrets: this tool offers no secrets, so the command did not run. Leave out "secrets"; commands run without credentials here.`;
}

/**
 * The bridge's text with its issues in it, in the model's words (`timeout`): this project's
 * bridge says them in its text, an older one said "...: see issues." and listed which limit only
 * in the issues, which the model would otherwise never read.
 */
function withIssues(text: string, error: RemoteTaskError): string {
  if (!InvalidRequestError.isInstance(error) || error.issues.length === 0) return text;
  const said = modelWords(text);
  const issues = error.issues.map((issue) => modelWords(issue.message).replace(/\.$/, ""));
  const stem = said.replace(/:? see issues\.?$/, "");
  const list = issues.filter((issue) => !stem.includes(issue)).join("; ");
  if (list === "") return stem === said ? said : `${stem}.`;
  return stem === said ? `${said} (${list})` : `${stem}: ${list}.`;
}

/**
 * A call the bridge refused or failed (an HTTP error answer), worded as the reference tool words
 * it: the bridge's own text (its `error`, else its `stderr`; with its issues), else `remote
 * sandbox returned HTTP <status>`. Undefined for a failure that is not such an answer, and for a
 * refusal for capacity: the client waited for room until the call's deadline, and its message
 * says for how long.
 */
function answerText(error: RemoteTaskError): string | undefined {
  if (CapacityError.isInstance(error)) return undefined;
  if (error.bridgeMessage !== undefined) return withIssues(error.bridgeMessage, error);
  const answered = [AuthenticationError, ForbiddenError, InvalidRequestError, BridgeError].some(
    (kind) => kind.isInstance(error),
  );
  return answered && error.status !== undefined
    ? `remote sandbox returned HTTP ${error.status}`
    : undefined;
}

function messageOf(error: unknown): string {
  if (RemoteTaskError.isInstance(error)) return answerText(error) ?? modelWords(error.message);
  const detail = error instanceof Error ? error.message : String(error);
  return `${REMOTE_TASK_TOOL_NAME} failed unexpectedly: ${detail}`;
}

/** Creates the framework-neutral `remote_task` tool. */
export function createRemoteTaskTool(options: RemoteTaskToolOptions = {}): RemoteTaskTool {
  const defaultTimeoutSeconds = options.defaultTimeoutSeconds ?? DEFAULT_TIMEOUT_SECONDS;
  if (!(defaultTimeoutSeconds > 0) || !Number.isFinite(defaultTimeoutSeconds)) {
    throw new RangeError("defaultTimeoutSeconds must be a positive number of seconds");
  }
  const network = options.network;
  if (network !== undefined && !networkPolicySchema.safeParse(network).success) {
    throw new TypeError(
      `network must be "none", "open" or {allow: [host patterns]}; got ${JSON.stringify(network)}`,
    );
  }
  const secrets = checkedSecrets(options.secrets);
  const parameters = remoteTaskParameters(defaultTimeoutSeconds, secrets);
  const injected = options.client;
  const env = options.env ?? defaultEnv();
  let owned: RemoteTaskClient | undefined;

  const clientFor = (): RemoteTaskToolClient => {
    if (injected) return injected;
    owned ??= clientFromEnv(env);
    return owned;
  };

  return {
    name: REMOTE_TASK_TOOL_NAME,
    title: REMOTE_TASK_TOOL_TITLE,
    description: options.description ?? remoteTaskDescription(defaultTimeoutSeconds, secrets),
    parameters,
    jsonSchema: remoteTaskJsonSchema(parameters),
    defaultTimeoutSeconds,
    async execute(args, { signal } = {}) {
      const refused = secrets.length === 0 ? unofferedSecrets(args) : undefined;
      if (refused !== undefined) return errorResult(refused);
      const parsed = parameters.safeParse(args);
      if (!parsed.success) return errorResult(describeIssues(parsed.error, secrets));
      const { command, timeout, secrets: asked } = parsed.data;
      if (signal?.aborted) return abortedResult();
      try {
        // Only the command, its deadline and which offered secrets it uses come from the model:
        // never `env`, a cwd or a network policy (unknown arguments are dropped by the schema);
        // the integrator's policy goes as is.
        const result = await clientFor().run(command, {
          timeoutSeconds: timeout,
          signal,
          ...(network === undefined ? {} : { network }),
          ...(asked === undefined || asked.length === 0 ? {} : { secrets: [...new Set(asked)] }),
        });
        return resultFromTask(result, timeout);
      } catch (error) {
        if (signal?.aborted || AbortError.isInstance(error)) return abortedResult();
        if (TimeoutError.isInstance(error)) return clientTimeoutResult(timeout);
        return errorResult(messageOf(error));
      }
    },
    async close() {
      const client = owned;
      owned = undefined;
      await client?.close();
    },
  };
}

/** True when `env` configures a bridge with a valid URL, i.e. when the tool can actually run. */
export function isRemoteTaskAvailable(env: EnvLike = defaultEnv()): boolean {
  return isConfigured(env);
}

/**
 * The tools to offer an agent: `[remote_task]` when `env` configures a bridge, otherwise `[]`, so
 * a host without a bridge never advertises what it cannot run.
 */
export function remoteTaskTools(
  env: EnvLike = defaultEnv(),
  options: CommonToolOptions = {},
): RemoteTaskTool[] {
  return isRemoteTaskAvailable(env) ? [createRemoteTaskTool({ ...options, env })] : [];
}

/** Accepts a ready tool or the options to create one (what every adapter takes). */
export type RemoteTaskToolSource = RemoteTaskTool | RemoteTaskToolOptions;

/** The core tool of `source`: the tool itself, or one created from the options. */
export function toRemoteTaskTool(source: RemoteTaskToolSource = {}): RemoteTaskTool {
  return isRemoteTaskTool(source) ? source : createRemoteTaskTool(source);
}

function isRemoteTaskTool(value: RemoteTaskToolSource): value is RemoteTaskTool {
  return "execute" in value && typeof value.execute === "function";
}

/**
 * A thin client of the Docker Engine API (the endpoints Docker and Podman both serve), over
 * node:http on a unix socket or plain TCP. It knows only what the backend uses: JSON requests,
 * and the attach stream hijacked from an HTTP upgrade. Node's own HTTP client is enough for that
 * and adds no dependency (see the bridge README for why not dockerode).
 */

import { type Agent, request as httpRequest, type IncomingMessage } from "node:http";
import type { Socket } from "node:net";
import { brandClass } from "@remote-task/internal";

/** API version every request names; Docker 20.10+ and Podman 3+ serve it. */
const API_VERSION = "v1.41";

/** Where the engine listens: a unix socket path, or a TCP host and port (plain HTTP). */
export type EngineEndpoint = { socketPath: string } | { host: string; port: number };

/** The engine answered with an error status, or could not be reached. */
export class EngineError extends Error {
  static readonly isInstance = brandClass(this, "remote-task.EngineError");
  override readonly name = "EngineError";

  constructor(
    message: string,
    /** HTTP status of the engine's answer; undefined when it was not reached. */
    readonly status?: number | undefined,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

interface EngineRequest {
  method: "GET" | "POST" | "DELETE";
  path: string;
  query?: Record<string, string> | undefined;
  body?: unknown;
  /** Statuses that are no error (e.g. 404 for a delete of a container that is gone). */
  accept?: readonly number[] | undefined;
  signal?: AbortSignal | undefined;
}

export interface EngineClient {
  readonly endpoint: EngineEndpoint;
  /** A JSON request; resolves with the parsed answer (undefined for an empty one). */
  json<T>(req: EngineRequest): Promise<{ status: number; body: T }>;
  /**
   * `POST /containers/{id}/attach` as a raw, hijacked connection: the container's multiplexed
   * output to read, its stdin to write (end it to close the container's stdin).
   */
  attach(id: string): Promise<Socket>;
  close(): void;
}

function target(endpoint: EngineEndpoint) {
  return "socketPath" in endpoint
    ? { socketPath: endpoint.socketPath }
    : { host: endpoint.host, port: endpoint.port };
}

function describe(endpoint: EngineEndpoint): string {
  return "socketPath" in endpoint
    ? `unix://${endpoint.socketPath}`
    : `tcp://${endpoint.host}:${endpoint.port}`;
}

function pathWith(req: Pick<EngineRequest, "path" | "query">): string {
  const query = req.query === undefined ? "" : `?${new URLSearchParams(req.query).toString()}`;
  return `/${API_VERSION}${req.path}${query}`;
}

async function readAll(res: IncomingMessage): Promise<string> {
  const parts: Buffer[] = [];
  for await (const part of res) parts.push(part as Buffer);
  return Buffer.concat(parts).toString("utf8");
}

/** The engine's own error text (`{"message": ...}`), or the raw body. */
function engineMessage(text: string): string {
  try {
    const parsed = JSON.parse(text) as { message?: unknown };
    if (typeof parsed.message === "string") return parsed.message;
  } catch {
    // not JSON
  }
  return text.trim().slice(0, 500);
}

/** A client of the engine at `endpoint`, through `agent`; its failures are `EngineError`s. */
export function createEngineClient(endpoint: EngineEndpoint, agent: Agent): EngineClient {
  const where = describe(endpoint);
  const unreachable = (error: Error) =>
    new EngineError(
      `The container engine at ${where} cannot be reached: ${error.message}`,
      undefined,
      {
        cause: error,
      },
    );

  return {
    endpoint,

    json<T>(req: EngineRequest) {
      return new Promise<{ status: number; body: T }>((resolve, reject) => {
        const payload = req.body === undefined ? undefined : JSON.stringify(req.body);
        const call = httpRequest(
          {
            ...target(endpoint),
            agent,
            method: req.method,
            path: pathWith(req),
            headers: {
              host: "docker",
              ...(payload === undefined
                ? {}
                : {
                    "content-type": "application/json",
                    "content-length": Buffer.byteLength(payload),
                  }),
            },
            signal: req.signal,
          },
          (res) => {
            readAll(res).then((text) => {
              const status = res.statusCode ?? 0;
              if ((status >= 200 && status < 300) || req.accept?.includes(status)) {
                let body: T | undefined;
                try {
                  body = text === "" ? undefined : (JSON.parse(text) as T);
                } catch {
                  body = undefined;
                }
                resolve({ status, body: body as T });
              } else {
                reject(
                  new EngineError(
                    `${req.method} ${req.path}: ${status} ${engineMessage(text)}`,
                    status,
                  ),
                );
              }
            }, reject);
          },
        );
        call.on("error", (error) =>
          reject(error.name === "AbortError" ? error : unreachable(error)),
        );
        call.end(payload);
      });
    },

    attach(id) {
      return new Promise<Socket>((resolve, reject) => {
        const call = httpRequest({
          ...target(endpoint),
          // A hijacked connection is never given back to a pool.
          agent: false,
          method: "POST",
          path: pathWith({
            path: `/containers/${id}/attach`,
            query: { stream: "1", stdin: "1", stdout: "1", stderr: "1" },
          }),
          headers: { host: "docker", connection: "Upgrade", upgrade: "tcp" },
        });
        call.on("upgrade", (_res, socket, head) => {
          if (head.length > 0) socket.unshift(head);
          resolve(socket);
        });
        call.on("response", (res) => {
          readAll(res).then(
            (text) =>
              reject(
                new EngineError(
                  `POST /containers/${id}/attach: ${res.statusCode} ${engineMessage(text)}`,
                  res.statusCode,
                ),
              ),
            reject,
          );
        });
        call.on("error", (error) => reject(unreachable(error)));
        call.end();
      });
    },

    close() {
      agent.destroy();
    },
  };
}

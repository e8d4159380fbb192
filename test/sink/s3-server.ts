/**
 * A real S3-compatible store on 127.0.0.1 for the sink tests: s3rver (npm), run as a child process
 * (test/sink/s3rver-child.mjs) on a free port, with its objects in a temporary directory, so that
 * `kill()` is a real crash (SIGKILL, connections cut) and `restart()` brings the same store back.
 *
 * What s3rver is and is not (see the commit that added it): it answers the S3 API the sink uses,
 * multipart included, and refuses an unknown access key id; it does not check SigV4 signatures nor
 * x-amz-checksum-sha256, which real stores do. The tests watch the checksum header go out instead.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const CHILD = fileURLToPath(new URL('./s3rver-child.mjs', import.meta.url));
/** How long a start may take before the test fails (a bound, not a measurement). */
const START_LIMIT_MS = 15_000;

export interface LoopbackS3 {
  /** `http://127.0.0.1:PORT`. */
  readonly endpoint: string;
  readonly port: number;
  /** Where the store keeps its objects. */
  readonly directory: string;
  readonly accessKeyId: string;
  readonly secretAccessKey: string;
  /** SIGKILL: every connection cut, nothing flushed; resolves once the process is gone. */
  kill(): Promise<void>;
  /** Starts the store again on the same port and directory (its buckets and objects intact). */
  restart(): Promise<void>;
  /** Stops it for good (the end of a test file). */
  stop(): Promise<void>;
}

/** `sameKeysAs`: a second store that takes the first's keys (the SDK reads one set from the environment). */
export async function startLoopbackS3(options: { buckets: readonly string[]; sameKeysAs?: LoopbackS3 }): Promise<LoopbackS3> {
  const directory = mkdtempSync(join(tmpdir(), 'genpipe-s3-'));
  const accessKeyId = options.sameKeysAs?.accessKeyId ?? 'GENPIPETESTKEY';
  const secretAccessKey = options.sameKeysAs?.secretAccessKey ?? `sink-secret-${randomBytes(12).toString('hex')}`;
  const args = (port: number): string[] => [CHILD, String(port), directory, accessKeyId, secretAccessKey, ...options.buckets];
  const first = await launch(args(0));
  let child: ChildProcess = first.child;
  const port = first.port;
  const exited = (proc: ChildProcess): Promise<void> =>
    proc.exitCode !== null || proc.signalCode !== null ? Promise.resolve() : new Promise((resolve) => proc.once('exit', () => resolve()));
  return {
    endpoint: `http://127.0.0.1:${port}`,
    port,
    directory,
    accessKeyId,
    secretAccessKey,
    async kill() {
      const proc = child;
      proc.kill('SIGKILL');
      await exited(proc);
    },
    async restart() {
      ({ child } = await launch(args(port)));
    },
    async stop() {
      const proc = child;
      proc.kill('SIGKILL');
      await exited(proc);
    },
  };
}

/** Starts the child and waits for its `{"port": N}` line (or its death, or the start limit). */
function launch(args: string[]): Promise<{ child: ChildProcess; port: number }> {
  const child = spawn(process.execPath, args, { stdio: ['ignore', 'pipe', 'pipe'] });
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      child.kill('SIGKILL');
      reject(new Error(`the loopback S3 store did not start within ${START_LIMIT_MS} ms: ${err.slice(0, 500)}`));
    }, START_LIMIT_MS);
    child.stderr?.on('data', (chunk: Buffer) => {
      err += chunk.toString('utf8');
    });
    child.stdout?.on('data', (chunk: Buffer) => {
      out += chunk.toString('utf8');
      const line = out.split('\n')[0];
      if (out.includes('\n') && line) {
        clearTimeout(timer);
        resolve({ child, port: (JSON.parse(line) as { port: number }).port });
      }
    });
    child.once('exit', (code, signal) => {
      clearTimeout(timer);
      reject(new Error(`the loopback S3 store exited before listening (${code ?? signal}): ${err.slice(0, 500)}`));
    });
  });
}

/**
 * Points the AWS SDK's default credential chain at the store's key, and at nothing else: no shared
 * files, no profile, no instance metadata (which would reach beyond 127.0.0.1). Returns the undo.
 */
export function useStoreCredentials(
  store: Pick<LoopbackS3, 'accessKeyId' | 'secretAccessKey'>,
  override: { accessKeyId?: string; secretAccessKey?: string } = {},
): () => void {
  const names = [
    'AWS_ACCESS_KEY_ID',
    'AWS_SECRET_ACCESS_KEY',
    'AWS_SESSION_TOKEN',
    'AWS_REGION',
    'AWS_DEFAULT_REGION',
    'AWS_PROFILE',
    'AWS_SHARED_CREDENTIALS_FILE',
    'AWS_CONFIG_FILE',
    'AWS_EC2_METADATA_DISABLED',
    'AWS_ENDPOINT_URL',
    'AWS_ENDPOINT_URL_S3',
  ];
  const saved = new Map(names.map((name) => [name, process.env[name]]));
  for (const name of names) delete process.env[name];
  process.env.AWS_ACCESS_KEY_ID = override.accessKeyId ?? store.accessKeyId;
  process.env.AWS_SECRET_ACCESS_KEY = override.secretAccessKey ?? store.secretAccessKey;
  process.env.AWS_REGION = 'us-east-1';
  process.env.AWS_SHARED_CREDENTIALS_FILE = join(tmpdir(), 'genpipe-no-aws-credentials');
  process.env.AWS_CONFIG_FILE = join(tmpdir(), 'genpipe-no-aws-config');
  process.env.AWS_EC2_METADATA_DISABLED = 'true';
  return () => {
    for (const [name, value] of saved) {
      if (value === undefined) delete process.env[name];
      else process.env[name] = value;
    }
  };
}

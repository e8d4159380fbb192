// A free TCP port on 127.0.0.1, for servers a test starts itself. No vitest import: the soak
// (bench/soak.mjs) bundles helpers that use it and runs outside the test runner.
import { createServer } from 'node:net';

export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address() as { port: number };
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}

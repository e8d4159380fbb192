// The loopback S3-compatible store of the sink tests, as a process of its own so that a test can
// SIGKILL it mid-upload and start it again on the same port and directory (test/sink/s3-server.ts).
// argv: port (0: any free one), directory, access key id, secret access key, bucket names...
// Prints one JSON line, {"port": N}, once it listens on 127.0.0.1.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const S3rver = require('s3rver');
const { DUMMY_ACCOUNT } = require('s3rver/lib/models/account.js');

const [port, directory, accessKeyId, secretAccessKey, ...buckets] = process.argv.slice(2);
// s3rver checks the access key id of every request (an unknown one gets InvalidAccessKeyId, 403);
// it does not compute SigV4 signatures, so the secret is only registered, never checked.
DUMMY_ACCOUNT.revokeAccessKey('S3RVER');
DUMMY_ACCOUNT.createKeyPair(accessKeyId, secretAccessKey);
const server = new S3rver({
  address: '127.0.0.1',
  port: Number(port),
  directory,
  silent: true,
  configureBuckets: buckets.map((name) => ({ name })),
});
const address = await server.run();
process.stdout.write(`${JSON.stringify({ port: address.port })}\n`);
process.on('SIGTERM', () => void server.close().finally(() => process.exit(0)));

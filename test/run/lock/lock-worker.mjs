// A separate process that takes pipeline locks for test/run/lock/lock.test.ts, driven over IPC.
// Plain JavaScript on the built library (dist/, `npm run build`): the race must be between real
// processes, each with its own pid, event loop and libuv thread pool.
//
// Messages: { id, op: 'acquire', path, runId, host?, clockMs?, staleMs?, refreshMs? } answers
// { id, won: true, displaced } or { id, won: false, code, message }; { op: 'exit' } ends the
// process at once, holding whatever it holds: a crash as far as the locks can tell.
import { acquirePipelineLock } from '../../../dist/run/lock/lock.js';

const never = new AbortController().signal;
const held = [];

process.on('message', async (msg) => {
  if (msg.op === 'exit') process.exit(0);
  if (msg.op !== 'acquire') return;
  const options = {};
  if (msg.host !== undefined) options.host = msg.host;
  // A constant clock: the lock's mtime is written as that instant and never moves.
  if (msg.clockMs !== undefined) options.clock = () => msg.clockMs;
  if (msg.staleMs !== undefined) options.staleMs = msg.staleMs;
  if (msg.refreshMs !== undefined) options.refreshMs = msg.refreshMs;
  try {
    const lock = await acquirePipelineLock(msg.path, msg.runId, 'skip', never, options);
    // Held, never released: a winner must keep the lock while the others of its trial try.
    held.push(lock);
    process.send({ id: msg.id, won: true, displaced: lock.displaced ?? null });
  } catch (error) {
    process.send({ id: msg.id, won: false, code: error.code ?? null, message: String(error.message) });
  }
});
process.on('disconnect', () => process.exit(0));
process.send({ ready: true });

// Preloaded into a genpipe process (NODE_OPTIONS=--import=...): the journal's writes fail with
// ENOSPC, as on a full disk, from the first write that carries a `submitted` record on. So the
// service has taken (and charged) a submit whose answer the journal cannot record: what
// `genpipe resume --adopt` recovers. Nothing else of the process is touched.
import { createRequire, syncBuiltinESMExports } from 'node:module';

const require = createRequire(import.meta.url);
const fsp = require('node:fs/promises');
const realOpen = fsp.open;
let full = false;

fsp.open = async function open(path, ...rest) {
  const handle = await realOpen.call(this, path, ...rest);
  if (!String(path).endsWith('journal.jsonl')) return handle;
  const write = handle.write.bind(handle);
  handle.write = (data, ...args) => {
    const text = Buffer.isBuffer(data) ? data.toString('utf8') : String(data);
    if (text.includes('"type":"submitted"')) full = true;
    if (!full) return write(data, ...args);
    const error = new Error(`ENOSPC: no space left on device, write`);
    Object.assign(error, { code: 'ENOSPC', errno: -28, syscall: 'write' });
    return Promise.reject(error);
  };
  return handle;
};
syncBuiltinESMExports();

// The one line a measured child process writes on stderr as it ends (read by harness.mjs
// measuredIn): `fields`, then its peak RSS and its CPU time, user and system, every thread. No
// imports, so loading it adds nothing to what it measures.
export function writeMeasure(fields = {}) {
  const usage = process.resourceUsage();
  process.stderr.write(
    `\n__measure__${JSON.stringify({ ...fields, maxRssMb: usage.maxRSS / 1024, userS: usage.userCPUTime / 1e6, systemS: usage.systemCPUTime / 1e6 })}\n`,
  );
}

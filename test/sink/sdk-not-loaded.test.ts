// The AWS SDK is loaded only when a manifest has a sink, so that other runs start fast: a process in which any import of
// an @aws-sdk package fails (test/sink/deny-aws-sdk.mjs) validates and opens the sinks of a manifest
// without one, through the built genpipe; the same process with a sink fails on the import, which
// shows the trap works.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { describe, expect, it } from 'vitest';

const root = fileURLToPath(new URL('../..', import.meta.url));
const register = fileURLToPath(new URL('./deny-aws-sdk-register.mjs', import.meta.url));
const dir = mkdtempSync(join(tmpdir(), 'genpipe-sdk-load-'));

function manifestFile(name: string, sink: string): string {
  const path = join(dir, name);
  writeFileSync(
    path,
    `version: 1\nname: t\n${sink}steps:\n  sheets:\n    model: character-sheet\n    input:\n      tier: cats\n      brief: a cat\n`,
  );
  return path;
}

/** Runs `genpipe validate` (the bundled CLI, as users start it) when asked, then opens the manifest's sinks through dist/. */
function runTrapped(manifest: string, validate: boolean): { status: number | null; stdout: string; stderr: string } {
  const script = `
    import { spawnSync } from 'node:child_process';
    import { loadManifestFile } from ${JSON.stringify(join(root, 'dist/manifest/load.js'))};
    import { RunSinks } from ${JSON.stringify(join(root, 'dist/sink/run-sinks.js'))};
    const validate = ${validate} ? spawnSync(process.execPath, ['--import', ${JSON.stringify(register)}, ${JSON.stringify(join(root, 'bin/genpipe.js'))}, 'validate', ${JSON.stringify(manifest)}], { encoding: 'utf8' }) : { status: 0 };
    if (validate.status !== 0) throw new Error('validate exited ' + validate.status + ': ' + validate.stderr);
    const sinks = await RunSinks.open(loadManifestFile(${JSON.stringify(manifest)}), { id: 'r', startedAt: new Date() });
    console.log(sinks === undefined ? 'no sinks' : 'sinks');
    sinks?.close();
  `;
  const result = spawnSync(process.execPath, ['--import', register, '--input-type=module', '-e', script], {
    encoding: 'utf8',
    env: { ...process.env, AWS_EC2_METADATA_DISABLED: 'true' },
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

describe('loading the AWS SDK', () => {
  it('a manifest without a sink never loads it; one with a sink does', { timeout: 30_000 }, () => {
    const without = runTrapped(manifestFile('plain.yaml', ''), true);
    expect(without.stderr).toBe('');
    expect(without).toMatchObject({ status: 0, stdout: 'no sinks\n' });

    const withSink = runTrapped(manifestFile('sink.yaml', 'defaults:\n  output:\n    sink: "s3://assets/x"\n'), false);
    expect(withSink.status).not.toBe(0);
    expect(withSink.stderr).toContain('the AWS SDK was loaded (@aws-sdk/');
  });
});

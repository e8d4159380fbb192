// The other readers of the shared YAML loader: config files, emulator fault files and accounts
// files refuse a recursive alias (and a collection key) at its file:line:col, as manifests do.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { readConfigFile, resolveConfig } from '../../src/api/config.js';
import { GenpipeError } from '../../src/api/errors.js';
import { accountsFromFile } from '../../src/emulator/accounts.js';
import { loadFaultProfile } from '../../src/emulator/faults.js';

const dir = mkdtempSync(join(tmpdir(), 'genpipe-yaml-consumers-'));
const file = (name: string, text: string): string => {
  const path = join(dir, name);
  writeFileSync(path, text, { mode: 0o600 });
  return path;
};
const refusal = (fn: () => unknown): GenpipeError => {
  try {
    fn();
  } catch (error) {
    expect(error).toBeInstanceOf(GenpipeError);
    return error as GenpipeError;
  }
  throw new Error('expected a refusal');
};

describe('recursive aliases outside manifests', () => {
  it('a config file: a config error at the alias, also through resolveConfig (exit 2)', () => {
    const path = file('config.yaml', 'base_url: https://x.test\ntimeouts: &t\n  connect_ms: 5\n  again: *t\n');
    const error = refusal(() => readConfigFile(path));
    expect(error.code).toBe('config');
    expect(error.message).toBe(
      `Invalid config file: ${path}:4:10: the alias *t is recursive: it sits inside the node anchored &t, which would contain itself.`,
    );
    expect(refusal(() => resolveConfig({ flags: { config: path }, env: { HF_KEY: 'id:secret-value' } })).code).toBe('config');
  });

  it('an emulator fault file: invalid input at the alias', () => {
    const path = file('faults.yaml', 'extends: flaky\nsubmit: &s [*s]\n');
    const error = refusal(() => loadFaultProfile(path));
    expect(error.code).toBe('invalid_input');
    expect(error.message).toMatch(new RegExp(`^Invalid fault file: ${path.replace(/[.]/g, '\\.')}:2:13: the alias \\*s is recursive`));
  });

  it('an emulator accounts file: invalid input at the alias, and a list used as a key at the key', () => {
    const recursive = file('accounts.yaml', 'accounts:\n  - &a {key_id: x, nested: *a}\n');
    expect(refusal(() => accountsFromFile(recursive)).message).toContain(`${recursive}:2:28: the alias *a is recursive`);
    const listKey = file('accounts-key.yaml', 'accounts: []\n[a, b]: 1\n');
    expect(refusal(() => accountsFromFile(listKey)).message).toContain(`${listKey}:2:1: a mapping key must be a plain value`);
  });
});

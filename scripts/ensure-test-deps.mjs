#!/usr/bin/env node
// Finds, or installs, the system programs the test suite (and `npm run bench`) drives for real:
//   - Chromium (/usr/bin/chromium), for the gallery and review pages in a real browser;
//   - redis-server, which the fleet tests start on free loopback ports;
//   - ffmpeg, which makes the gallery's video poster frames (a run without it shows a placeholder);
//   - tmux, the pseudo-terminal in which the progress line is read as a terminal shows it;
//   - prometheus and promtool (one package), which scrape and check the metrics genpipe exposes.
// On Debian, a missing one is installed with apt-get (as root, or through passwordless sudo).
// When neither works, this exits 1 with one sentence saying what to install: the tests that need
// these programs are never skipped, so a machine without them fails here, loudly and early.
import { spawnSync } from 'node:child_process';
import { accessSync, constants, existsSync } from 'node:fs';
import { delimiter, join } from 'node:path';

const NEEDS = [
  { what: 'Chromium', pkg: 'chromium', find: () => executable('/usr/bin/chromium') },
  { what: 'redis-server', pkg: 'redis-server', find: () => onPath('redis-server') },
  { what: 'ffmpeg', pkg: 'ffmpeg', find: () => executable('/usr/bin/ffmpeg') ?? onPath('ffmpeg') },
  { what: 'tmux', pkg: 'tmux', find: () => onPath('tmux') },
  { what: 'prometheus', pkg: 'prometheus', find: () => onPath('prometheus') },
  { what: 'promtool', pkg: 'prometheus', find: () => onPath('promtool') },
];

function executable(path) {
  try {
    accessSync(path, constants.X_OK);
    return path;
  } catch {
    return undefined;
  }
}

function onPath(name) {
  for (const dir of [...(process.env.PATH ?? '').split(delimiter), '/usr/sbin', '/usr/bin']) {
    const found = dir && executable(join(dir, name));
    if (found) return found;
  }
  return undefined;
}

function run(argv) {
  console.error(`ensure-test-deps: ${argv.join(' ')}`);
  return (
    spawnSync(argv[0], argv.slice(1), {
      stdio: ['ignore', 'inherit', 'inherit'],
      env: { ...process.env, DEBIAN_FRONTEND: 'noninteractive' },
    }).status === 0
  );
}

const missing = NEEDS.filter((need) => !need.find());
if (missing.length > 0) {
  const pkgs = [...new Set(missing.map((need) => need.pkg))];
  const isRoot = typeof process.getuid === 'function' && process.getuid() === 0;
  const prefix = isRoot ? [] : executable('/usr/bin/sudo') ? ['sudo', '-n'] : undefined;
  if (prefix && existsSync('/usr/bin/apt-get')) {
    // The package lists of a fresh machine may be absent or stale: install, and on failure update and retry.
    if (!run([...prefix, 'apt-get', 'install', '-y', ...pkgs])) {
      run([...prefix, 'apt-get', 'update']);
      run([...prefix, 'apt-get', 'install', '-y', ...pkgs]);
    }
  }
}

const still = NEEDS.filter((need) => !need.find());
const stillPkgs = [...new Set(still.map((need) => need.pkg))];
if (still.length > 0) {
  console.error(
    `The tests need ${still.map((need) => need.what).join(', ')}, which could not be found or installed: ` +
      `install the Debian package${stillPkgs.length > 1 ? 's' : ''} ${stillPkgs.join(' ')} ` +
      `(apt-get install -y ${stillPkgs.join(' ')}) and run the tests again.`,
  );
  process.exit(1);
}
for (const need of NEEDS) console.error(`ensure-test-deps: ${need.what} at ${need.find()}`);

#!/usr/bin/env node
// Stages and packs the npm packages, in biome's shape: one platform package per target
// (@pgoutput-codec/cli-OS-CPU[-musl], carrying the program in bin/, with "os", "cpu" and on
// Linux "libc", so npm installs only the one that fits) and the main package pgoutput-codec,
// which lists every platform package as an optional dependency at the same version. Nothing
// is downloaded at install time and nothing runs then (no postinstall).
//
//   node packages/npm/pack.mjs --version V --out DIR --target OS:CPU:LIBC:/path/to/pgoutput [--target ...]
//
// LIBC is glibc or musl on Linux, '-' (or empty) elsewhere. The tarballs go to DIR (`npm
// pack --pack-destination`); their paths are printed, one a line. Plain Node, no dependencies.

import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';

const here = path.dirname(fileURLToPath(import.meta.url));
const root = path.resolve(here, '../..');
const SCOPE = '@pgoutput-codec';
const MAIN = path.join(here, 'pgoutput-codec');

function usage(message) {
  if (message) console.error(`pack.mjs: ${message}`);
  console.error('usage: node pack.mjs --version V --out DIR --target OS:CPU:LIBC:/path/to/pgoutput [--target ...]');
  process.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    options: {
      version: { type: 'string' },
      out: { type: 'string' },
      target: { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
    },
    strict: true,
  }));
} catch (error) {
  usage(error.message);
}
if (values.help) usage();
const version = values.version;
if (!version || !/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?(\+[0-9A-Za-z.-]+)?$/.test(version)) usage(`--version must be a semantic version, not ${JSON.stringify(version)}`);
if (!values.out) usage('--out is required');
if (!values.target || values.target.length === 0) usage('at least one --target is required');

const OSES = new Set(['linux', 'darwin', 'win32', 'freebsd', 'openbsd', 'netbsd', 'sunos', 'aix']);
const CPUS = new Set(['x64', 'arm64', 'arm', 'ia32', 'ppc64', 's390x', 'riscv64', 'loong64']);

const targets = values.target.map((spec) => {
  const parts = spec.split(':');
  if (parts.length < 4) usage(`--target ${spec}: expected OS:CPU:LIBC:/path/to/pgoutput`);
  const [osName, cpu, libcRaw] = parts;
  const binary = path.resolve(parts.slice(3).join(':'));
  const libc = libcRaw === '-' ? '' : libcRaw;
  if (!OSES.has(osName)) usage(`--target ${spec}: ${osName} is not an npm "os"`);
  if (!CPUS.has(cpu)) usage(`--target ${spec}: ${cpu} is not an npm "cpu"`);
  if (osName === 'linux' && !['glibc', 'musl'].includes(libc)) usage(`--target ${spec}: on linux LIBC is glibc or musl`);
  if (osName !== 'linux' && libc) usage(`--target ${spec}: LIBC is for linux only ('-' elsewhere)`);
  if (!fs.existsSync(binary) || !fs.statSync(binary).isFile()) usage(`--target ${spec}: ${binary} is not a file`);
  const name = `${SCOPE}/cli-${osName}-${cpu}${libc === 'musl' ? '-musl' : ''}`;
  return { os: osName, cpu, libc, binary, name };
});
const names = targets.map((t) => t.name);
const twice = names.find((n, i) => names.indexOf(n) !== i);
if (twice) usage(`${twice} is given twice`);

const out = path.resolve(values.out);
fs.mkdirSync(out, { recursive: true });
const stage = fs.mkdtempSync(path.join(os.tmpdir(), 'pgoutput-npm-pack-'));

const source = JSON.parse(fs.readFileSync(path.join(MAIN, 'package.json'), 'utf8'));
for (const key of ['version', 'optionalDependencies']) {
  if (key in source) {
    console.error(`pack.mjs: ${path.join(MAIN, 'package.json')} must not hold "${key}": this script fills it in`);
    process.exit(1);
  }
}

// The workspace's license files, copied into a staged package; their names, for its "files"
// (npm adds LICENSE and LICENCE by itself, not LICENSE-MIT).
function licenses(dir) {
  const copied = [];
  for (const file of ['LICENSE-MIT', 'LICENSE-APACHE']) {
    const from = path.join(root, file);
    if (fs.existsSync(from)) {
      fs.copyFileSync(from, path.join(dir, file));
      copied.push(file);
    }
  }
  return copied;
}

function writeJson(file, value) {
  fs.writeFileSync(file, JSON.stringify(value, null, 2) + '\n');
}

function pack(dir) {
  const answer = execFileSync('npm', ['pack', '--json', '--pack-destination', out], {
    cwd: dir,
    encoding: 'utf8',
    stdio: ['ignore', 'pipe', 'inherit'],
  });
  const [packed] = JSON.parse(answer);
  return path.join(out, packed.filename);
}

const tarballs = [];
try {
  const template = fs.readFileSync(path.join(here, 'platform', 'README.md'), 'utf8');
  for (const t of targets) {
    const dir = path.join(stage, t.name.replace('/', '+'));
    fs.mkdirSync(path.join(dir, 'bin'), { recursive: true });
    const exe = `pgoutput${t.os === 'win32' ? '.exe' : ''}`;
    const bin = path.join(dir, 'bin', exe);
    fs.copyFileSync(t.binary, bin);
    fs.chmodSync(bin, 0o755);
    const platform = `${t.os} ${t.cpu}${t.libc ? ' ' + t.libc : ''}`;
    const manifest = {
      name: t.name,
      version,
      description: `The pgoutput program of pgoutput-codec for ${platform}`,
      license: source.license,
      repository: { ...source.repository, directory: 'packages/npm/platform' },
      homepage: source.homepage,
      os: [t.os],
      cpu: [t.cpu],
      ...(t.os === 'linux' ? { libc: [t.libc] } : {}),
      files: ['bin', ...licenses(dir)],
      preferUnplugged: true,
      engines: source.engines,
    };
    writeJson(path.join(dir, 'package.json'), manifest);
    const readme = template
      .replaceAll('{{name}}', t.name)
      .replaceAll('{{platform}}', platform)
      .replaceAll('{{version}}', version)
      .replaceAll('{{os}}', JSON.stringify([t.os]))
      .replaceAll('{{cpu}}', JSON.stringify([t.cpu]))
      .replaceAll('{{libc_field}}', t.os === 'linux' ? `, "libc": ${JSON.stringify([t.libc])}` : '');
    fs.writeFileSync(path.join(dir, 'README.md'), readme);
    tarballs.push(pack(dir));
  }

  const main = path.join(stage, 'pgoutput-codec');
  fs.cpSync(MAIN, main, { recursive: true });
  const manifest = { name: source.name, version, ...source };
  manifest.optionalDependencies = Object.fromEntries(names.map((n) => [n, version]));
  manifest.files = [...manifest.files, ...licenses(main)];
  writeJson(path.join(main, 'package.json'), manifest);
  fs.chmodSync(path.join(main, 'bin', 'pgoutput.js'), 0o755);
  fs.copyFileSync(path.join(here, 'README.md'), path.join(main, 'README.md'));
  tarballs.push(pack(main));
} finally {
  fs.rmSync(stage, { recursive: true, force: true });
}
for (const tarball of tarballs) console.log(tarball);

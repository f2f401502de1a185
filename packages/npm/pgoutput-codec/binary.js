'use strict';
// Where the `pgoutput` program is, shared by the `pgoutput` command (bin/pgoutput.js) and
// the client (index.js): PGOUTPUT_BINARY, else the platform package npm installed beside
// this one (an optional dependency per platform, as biome and esbuild ship their binaries).

const fs = require('fs');

/** The environment variable naming the program, which wins over the platform package. */
const ENV = 'PGOUTPUT_BINARY';

/** On Linux, the C library of this Node: `'glibc'` or `'musl'`; `null` elsewhere. */
function libc() {
  if (process.platform !== 'linux') return null;
  try {
    const report = process.report.getReport();
    const header = (typeof report === 'string' ? JSON.parse(report) : report).header;
    return header && header.glibcVersionRuntime ? 'glibc' : 'musl';
  } catch {
    // No report (a Node built without it): musl systems are the ones that say so.
    return fs.existsSync('/etc/alpine-release') ? 'musl' : 'glibc';
  }
}

/** The name of the platform package for this platform (or the one given). */
function platformPackage(platform = process.platform, arch = process.arch, c = libc()) {
  return `@pgoutput-codec/cli-${platform}-${arch}${platform === 'linux' && c === 'musl' ? '-musl' : ''}`;
}

function notFound(message) {
  const error = new Error(message);
  error.code = 'PGOUTPUT_BINARY_NOT_FOUND';
  return error;
}

/**
 * The path of the `pgoutput` program: `explicit` if given, else $PGOUTPUT_BINARY, else the
 * one in this platform's package. Throws an error (code PGOUTPUT_BINARY_NOT_FOUND) that
 * names the platform package when none is installed.
 */
function findBinary(explicit) {
  for (const [chosen, where] of [[explicit, 'the binary option'], [process.env[ENV], ENV]]) {
    if (chosen) {
      if (!fs.existsSync(chosen) || !fs.statSync(chosen).isFile()) {
        throw notFound(`the pgoutput program ${JSON.stringify(chosen)} (from ${where}) does not exist`);
      }
      return chosen;
    }
  }
  const name = platformPackage();
  const file = `${name}/bin/pgoutput${process.platform === 'win32' ? '.exe' : ''}`;
  try {
    return require.resolve(file);
  } catch {
    throw notFound(
      `the pgoutput program was not found: the package ${name} (for ${process.platform} ` +
        `${process.arch}${libc() ? ' ' + libc() : ''}) is not installed. npm installs it with ` +
        'pgoutput-codec as an optional dependency on the platforms it is published for ' +
        '(linux x64 glibc); reinstall without --omit=optional or --no-optional, or build ' +
        `the program (cargo install --locked --path crates/cli) and name it in ${ENV}`,
    );
  }
}

module.exports = { ENV, findBinary, libc, platformPackage };

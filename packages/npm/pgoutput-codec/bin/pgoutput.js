#!/usr/bin/env node
'use strict';
// `pgoutput`: runs the program of this platform's package with these arguments, its
// standard streams inherited, signals passed on to it, and its exit status (or the signal
// that ended it) as this command's own.

const { spawn } = require('child_process');
const { findBinary } = require('../binary.js');

let binary;
try {
  binary = findBinary();
} catch (error) {
  process.stderr.write(`pgoutput: ${error.message}\n`);
  process.exit(1);
}

// The signals are taken before the program starts: once it has said it listens, a signal
// to this process alone (kill PID, a test harness stopping `npx pgoutput serve`) must find
// the handler, or it ends this process and leaves the program behind (a loaded run of the
// tests once signalled in between).
let child = null;
const SIGNALS = ['SIGINT', 'SIGTERM', 'SIGHUP', 'SIGQUIT', 'SIGUSR1', 'SIGUSR2'];
const forward = (signal) => {
  try {
    child.kill(signal);
  } catch {
    // It has ended already.
  }
};
for (const signal of SIGNALS) {
  try {
    process.on(signal, forward);
  } catch {
    // Not a signal of this platform.
  }
}
// Asynchronous, not spawnSync: a blocked event loop could not pass a signal on.
child = spawn(binary, process.argv.slice(2), { stdio: 'inherit' });
child.on('error', (error) => {
  process.stderr.write(`pgoutput: could not run ${binary}: ${error.message}\n`);
  process.exit(1);
});
child.on('exit', (code, signal) => {
  if (signal) {
    // End as it ended: by the same signal, with this process's default action.
    for (const s of SIGNALS) process.removeAllListeners(s);
    process.kill(process.pid, signal);
    // A signal whose default action is not to end (or none arrived): 128 + its number.
    setTimeout(() => process.exit(128 + (require('os').constants.signals[signal] || 0)), 100);
    return;
  }
  process.exit(code === null ? 1 : code);
});

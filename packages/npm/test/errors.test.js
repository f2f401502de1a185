'use strict';
// What the client says when something goes wrong, and the process's life.

const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { test } = require('node:test');
const codec = require('pgoutput-codec');
const { ControlError, PgoutputError, StartError, TestServer, WaitTimeout, startServer } = codec;
const { script, transactions } = require('./consumers.js');

test('control errors carry the status and the server\'s reason', async (t) => {
  const server = await startServer({ script: script(1), publication: 'p' });
  t.after(() => server.close());

  const refused = await server.addFaults({ when: { on: 'sometime' }, then: { do: 'close' } }).catch((e) => e);
  assert.ok(refused instanceof ControlError && refused instanceof PgoutputError, String(refused));
  assert.equal(refused.status, 400);
  assert.equal(refused.method, 'POST');
  assert.equal(refused.path, '/faults');
  assert.match(refused.reason, /^not a fault rule: /);
  assert.equal(refused.message, `POST /faults: 400: ${refused.reason}`);

  const waited = await server.waitForFlush('nobody', null, 100).catch((e) => e);
  assert.ok(waited instanceof WaitTimeout && waited instanceof ControlError, String(waited));
  assert.equal(waited.status, 408);
  assert.match(waited.reason, /timed out before the slot existed/);
  assert.equal(waited.confirmedFlushLsn, null);

  const missing = await server.holdSlot('nope', 10).catch((e) => e);
  assert.ok(missing instanceof ControlError);
  assert.equal(missing.status, 404);
  assert.equal(missing.reason, 'replication slot "nope" does not exist');
  await assert.rejects(server.slot('nope'), PgoutputError);

  // What works: rules armed and cleared, the probe, appended events.
  assert.equal(await server.addFaults([{ when: { on: 'commit', transaction: 1 }, then: { do: 'reset' } }]), 1);
  assert.equal((await server.faults()).length, 1);
  await server.clearFaults();
  assert.deepEqual(await server.faults(), []);
  assert.equal(await server.probe(), null);
  assert.deepEqual(await server.setProbe({ every: 2, waitMs: 500 }), { every: 2, after: 1, wait_ms: 500 });
  await server.clearProbe();
  const before = await server.walEnd();
  const after = await server.append(transactions(1, 3));
  assert.equal(codec.compareLsn(after, before), 1);
  assert.equal(await server.walEnd(), after);
  await server.checkpoint();
  assert.deepEqual(await server.clients(), []);
});

test('a script the server refuses is a StartError with its log', async () => {
  const bad = [{ type: 'begin' }, { type: 'insert', relation_oid: 999, new_tuple: [] }, { type: 'commit' }];
  const error = await startServer({ script: bad }).catch((e) => e);
  assert.ok(error instanceof StartError, String(error));
  assert.match(error.message, /^pgoutput serve exited with status \d+ before it listened\n--- its log ---\n/);
  assert.match(error.log, /999/);
  assert.match(error.log, /script\.jsonl/);
  // Its files are gone with it.
  const file = /(\/\S*script\.jsonl)/.exec(error.log)[1];
  assert.equal(fs.existsSync(path.dirname(file)), false);
});

test('close() stops the server, and twice is fine', async () => {
  const server = new TestServer({ script: script(1), publication: 'p' });
  assert.equal(server.running, false);
  assert.equal(await server.start(), server);
  assert.ok(server.running);
  assert.match(server.url, /^postgresql:\/\/postgres@127\.0\.0\.1:\d+\/postgres$/);
  assert.deepEqual(server.clientConfig, { host: '127.0.0.1', port: server.port, user: 'postgres', database: 'postgres' });
  assert.match(server.conninfo({ application_name: 'my app' }), / application_name='my app'$/);
  await assert.rejects(server.start(), PgoutputError);
  await Promise.all([server.close(), server.close()]);
  await server.close();
  assert.equal(server.running, false);
  assert.equal(server.exitCode, 0);
  assert.match(server.log, /pgoutput serve: stopping/);
  await assert.rejects(server.walEnd(), /has exited/);
});

test('shutdown() ends the program', async () => {
  const server = await startServer({ script: script(1), publication: 'p' });
  await server.shutdown();
  const { code } = await server.exited;
  assert.equal(code, 0);
  await server.close();
});

test('the program comes from the platform package', () => {
  assert.equal(process.env.PGOUTPUT_BINARY, undefined);
  const binary = codec.findBinary();
  assert.match(binary, /node_modules\/@pgoutput-codec\/cli-linux-x64\/bin\/pgoutput$/);
  assert.equal(codec.platformPackage(), '@pgoutput-codec/cli-linux-x64');
  assert.equal(codec.platformPackage('linux', 'arm64', 'musl'), '@pgoutput-codec/cli-linux-arm64-musl');
  assert.equal(codec.platformPackage('darwin', 'arm64', null), '@pgoutput-codec/cli-darwin-arm64');
  assert.throws(() => codec.findBinary('/nonexistent/pgoutput'), { code: 'PGOUTPUT_BINARY_NOT_FOUND' });
});

test('LSNs as text and as BigInt', () => {
  assert.equal(codec.lsnToBigInt('16/B374D848'), 0x16b374d848n);
  assert.equal(codec.lsnToBigInt('00000000/01000360'), 0x1000360n); // pg-logical-replication's form
  assert.equal(codec.lsnToText(0x16b374d848n), '16/B374D848');
  assert.equal(codec.lsnToText(0), '0/0');
  assert.equal(codec.lsnToText('00000000/01000360'), '0/1000360');
  assert.equal(codec.compareLsn('0/1000360', '0/FF'), 1);
  assert.throws(() => codec.lsnToBigInt('nonsense'), TypeError);
  assert.throws(() => codec.lsnToBigInt(-1n), RangeError);
});

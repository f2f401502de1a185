// The TypeScript types (index.d.ts) as a TypeScript test suite uses them: compiled with
// --strict by test/run (tsc --noEmit), never run.
import { startServer, startProxy, runTrial, startCluster, Cluster, FindingsError, ControlError, WaitTimeout, TrialFailed, TrialReport, lsnToBigInt, lsnToText, TestServer } from 'pgoutput-codec';

async function main(): Promise<void> {
  const server: TestServer = await startServer({ script: [{ type: 'begin' }, { type: 'commit' }], publication: 'p', probe: 1,
    faults: [{ when: { on: 'change', transaction: 2, after: 1 }, then: { do: 'close' }, slot: 'app' }] });
  const dsn: string = server.dsn;
  const end: string = await server.walEnd();
  const confirmed: string = await server.waitForFlush('app', end, 1000);
  const big: bigint = lsnToBigInt(confirmed);
  lsnToText(big);
  const findings = await server.findings();
  findings.forEach((f) => f.text.toUpperCase());
  const slots = await server.slots();
  slots.forEach((s) => s.confirmed_flush_lsn);
  try { await server.assertNoFindings(); } catch (e) { if (e instanceof FindingsError) e.findings.length; }
  try { await server.addFaults({ when: { on: 'change', transaction: 1, after: 1 }, then: { do: 'reset' } }); } catch (e) { if (e instanceof ControlError) e.status.toFixed(); if (e instanceof WaitTimeout) e.reason; }
  await server.close();
  const proxy = await startProxy({ upstream: 'host=127.0.0.1 port=5432 user=postgres dbname=postgres' });
  (await proxy.connections()).forEach((c) => c.ended);
  await proxy.close();
  const report: TrialReport = await runTrial({ command: ['python3', 'consumer.py'], upstream: dsn, scenarios: ['baseline'], seed: 7 });
  const worst: 'pass' | 'warn' | 'unknown' | 'fail' = report.verdict;
  report.scenario('baseline').kinds.forEach((k) => k.toUpperCase());
  Object.values((await runTrial({ attach: '127.0.0.1:54999', slot: 'pgoutput_trial_attached', sink: '/tmp/sink.jsonl' })).skipped).forEach((why) => why.toUpperCase());
  try { report.assertPassed({ allowWarn: false }); } catch (e) { if (e instanceof TrialFailed) e.report.exitCode.toFixed(); }
  const cluster: Cluster = await startCluster({ settings: ['max_wal_senders = 7'], startupTimeoutMs: 1000 });
  cluster.dsn.toUpperCase();
  await cluster.stop();
  void dsn;
  void worst;
}
void main();

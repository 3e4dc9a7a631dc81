// graphile-worker's side of the wake-up latency runs: `node enqueuer.js`, the connection string
// in $DATABASE_URL. Connects, prints "ready", then for each line "<i>" on stdin adds the job
// "noop" {i} with addJob and prints "<i> <before the call> <after it returned>" (epoch seconds).
const readline = require("readline");
const { performance } = require("perf_hooks");
const { makeWorkerUtils } = require("graphile-worker");

const now = () => (performance.timeOrigin + performance.now()) / 1000;

async function main() {
  const utils = await makeWorkerUtils({ connectionString: process.env.DATABASE_URL });
  await utils.withPgClient((client) => client.query("select 1"));
  console.log("ready");
  try {
    for await (const line of readline.createInterface({ input: process.stdin })) {
      const i = parseInt(line, 10);
      const before = now();
      await utils.addJob("noop", { i });
      console.log(`${i} ${before} ${now()}`);
    }
  } finally {
    await utils.release();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

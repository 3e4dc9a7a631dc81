// graphile-worker enqueue from a fresh process: `node enqueue.js JOBS BATCH`, the connection
// string in $DATABASE_URL. JOBS no-op jobs ("noop", payload {i: n}): `addJob` one at a time when
// BATCH is 1, else `addJobs` with BATCH specs per call (graphile-worker's bulk API, one statement
// per call). Prints one JSON line: `seconds` from just before makeWorkerUtils (a fresh process
// pays its first connection) to the last call's return.
const { makeWorkerUtils } = require("graphile-worker");

async function main() {
  const jobs = parseInt(process.argv[2], 10);
  const batch = parseInt(process.argv[3], 10);
  const t0 = process.hrtime.bigint();
  const seconds = () => Number(process.hrtime.bigint() - t0) / 1e9;
  const utils = await makeWorkerUtils({ connectionString: process.env.DATABASE_URL });
  let first = null;
  try {
    for (let start = 0; start < jobs; start += batch) {
      const end = Math.min(jobs, start + batch);
      if (batch === 1) {
        await utils.addJob("noop", { i: start });
      } else {
        const specs = [];
        for (let n = start; n < end; n++) specs.push({ identifier: "noop", payload: { i: n } });
        await utils.addJobs(specs);
      }
      if (first === null) first = seconds();
    }
    const total = seconds();
    console.log(JSON.stringify({ jobs, batch, seconds: total, first_call_seconds: first }));
  } finally {
    await utils.release();
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

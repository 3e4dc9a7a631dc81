// The benchmark's no-op task for graphile-worker (task identifier "noop"). With BENCH_STARTS_OUT
// set (the wake-up latency runs), it appends "<payload.i> <epoch seconds>" when it starts.
const fs = require("fs");
const { performance } = require("perf_hooks");

const out = process.env.BENCH_STARTS_OUT;
module.exports = out
  ? async (payload) => {
      fs.appendFileSync(out, `${payload.i} ${(performance.timeOrigin + performance.now()) / 1000}\n`);
    }
  : async () => {};

// graphile-worker's configuration for `python -m benchmarks --peers` (loaded by its own CLI with
// `-C graphile.config.js`). Settings come from the environment so one file serves every run:
//   BENCH_LOCAL_QUEUE_SIZE     localQueue.size (unset: graphile-worker's default, no local queue)
//   BENCH_COMPLETE_BATCH_DELAY completeJobBatchDelay and failJobBatchDelay in ms (unset: default, -1)
//   BENCH_MAX_POOL_SIZE        maxPoolSize (unset: default)
//   BENCH_EVENTS_OUT           file to write this process's completion log to, at exit
// The completion log is graphile-worker's own events: the time of each `job:complete` and of
// `pool:release` (emitted once the pool has finished, after the completion batcher has flushed),
// in milliseconds since the Unix epoch. graphile-worker deletes a job when it completes it, so
// these events are its only record of when.
const { EventEmitter } = require("events");
const fs = require("fs");

const events = new EventEmitter();
const completed = [];
const released = [];
events.on("job:complete", ({ error }) => {
  if (!error) completed.push(Date.now());
});
events.on("pool:release", () => released.push(Date.now()));
if (process.env.BENCH_EVENTS_OUT) {
  process.on("exit", () => {
    fs.writeFileSync(process.env.BENCH_EVENTS_OUT, JSON.stringify({ completed, released }));
  });
}

const worker = { events, taskDirectory: `${__dirname}/tasks` };
const int = (name) => (process.env[name] === undefined ? undefined : parseInt(process.env[name], 10));
if (int("BENCH_LOCAL_QUEUE_SIZE") !== undefined) worker.localQueue = { size: int("BENCH_LOCAL_QUEUE_SIZE") };
if (int("BENCH_COMPLETE_BATCH_DELAY") !== undefined) {
  worker.completeJobBatchDelay = int("BENCH_COMPLETE_BATCH_DELAY");
  worker.failJobBatchDelay = int("BENCH_COMPLETE_BATCH_DELAY");
}
if (int("BENCH_MAX_POOL_SIZE") !== undefined) worker.maxPoolSize = int("BENCH_MAX_POOL_SIZE");

module.exports = { worker };

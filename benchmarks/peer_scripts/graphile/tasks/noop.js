// The benchmark's no-op task for graphile-worker (task identifier "noop").
module.exports = async () => {};

// Package play holds the drivers of troupe's episodes, on top of the
// scenario contract and the stepped episode of package env: Run, the one
// play loop, which plays a run's episodes in groups through an
// env.Executor and hands each finished group to an Output in episode
// order, whatever the concurrency; and, in play/table, the shared episode
// whose seats outside sessions hold.
//
// Run is what troupe run, troupe serve's requests, experiments' cells, NATS
// workers and league matches all go through, each with its own executor,
// output and numbering. Package trajectories' Output is the Output a run
// usually has (credit, samples, sinks).
package play

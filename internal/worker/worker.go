// Package worker carries the number of the worker that runs a call in its
// context: play.Run numbers its workers and finishes each group of episodes
// with its worker's context, and trajectories.Output keeps the arrays it
// reuses from group to group per worker, so that they stay in the cache of
// the core that writes them. The number is a hint for such caches, never
// part of what a call computes: a call whose context carries none works the
// same, as worker 0.
package worker

import "context"

// key is the context key of the worker number.
type key struct{}

// With returns ctx carrying worker number k (k >= 0).
func With(ctx context.Context, k int) context.Context {
	return context.WithValue(ctx, key{}, k)
}

// Of returns the worker number ctx carries, or 0 when it carries none (or
// a negative one).
func Of(ctx context.Context) int {
	k, _ := ctx.Value(key{}).(int)
	return max(k, 0)
}

// Package viewer is `troupe view`: a local web viewer of troupe's files,
// the slime samples (flat or nested JSONL) and the episode records
// (troupe.episode/v2), that shows who said what to whom, in which state,
// and who got the credit.
//
// Open indexes a file in one streaming pass, split between the CPUs at
// line boundaries that never cut a flat episode: for each episode it keeps
// where its bytes are and what the overview, the list and the comparison
// need (identity, status, end, team reward, per allocator and per role the
// sums of its samples), read by a scanner that skips prompts, views and
// token ids without building them. A file of a million samples is indexed
// in about a second and a half of CPU and keeps a few MiB. Lines the index
// cannot use are Problems, listed on the pages with their line numbers. An
// episode is decoded when a page asks for it (File.Load), by the strict
// decoders of package trajectories and protocol, and the last ones are
// kept in a bounded cache.
//
// Viewer renders the pages with html/template, which escapes every text of
// the files; the charts, the sequence diagram, the state timelines and the
// role diagrams are SVG whose geometry is computed in Go, and a small
// embedded script filters and sorts the list and adds a few interactions.
// Handler serves the pages and the embedded assets and nothing else, with
// a strict Content-Security-Policy, on loopback names only unless a token
// is required; Serve listens; Export writes the same pages, at the same
// relative paths, as a static site.
//
// Role diagrams come from the scenario registry of the running binary
// (Scenarios, an *env.Registry): an episode of a scenario the binary does
// not know is shown without them, saying so.
package viewer

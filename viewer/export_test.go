package viewer

// OpenWith indexes path with the given workers and least chunk, for tests
// that check the parallel pass against a single worker.
func OpenWith(path string, workers int, chunk int64) (*File, error) {
	f, err := Open(path)
	if err != nil {
		return nil, err
	}
	g := &File{Path: f.Path, Name: f.Name, Size: f.Size, f: f.f}
	return g, g.build(workers, chunk)
}

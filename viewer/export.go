package viewer

import (
	"bytes"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// ExportStats says what Export wrote.
type ExportStats struct {
	Pages, Episodes int
	Bytes           int64
}

// Export writes the viewer's pages into dir as a static site that opens
// from the file system (index.html) with nothing else: the same pages at
// the same relative paths as served, the assets beside them. maxEpisodes
// (0: all) bounds the episode pages written per file: the list and the
// other pages then link only those. Export must not run while the viewer
// serves.
func (v *Viewer) Export(dir string, maxEpisodes int) (ExportStats, error) {
	var st ExportStats
	v.linked, v.exporting = maxEpisodes, true
	defer func() { v.linked, v.exporting = 0, false }()
	write := func(rel string, data []byte) error {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
		st.Pages++
		st.Bytes += int64(len(data))
		return nil
	}
	page := func(rel string) error {
		var b bytes.Buffer
		if err := v.render(&b, rel, nil); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		return write(rel, b.Bytes())
	}
	if err := page("index.html"); err != nil {
		return st, err
	}
	for i, f := range v.files {
		for _, rel := range []string{fmt.Sprintf("run-%d/index.html", i), fmt.Sprintf("run-%d/episodes.html", i)} {
			if err := page(rel); err != nil {
				return st, err
			}
		}
		if err := write(fmt.Sprintf("run-%d/episodes-index.js", i), f.indexJS(maxEpisodes)); err != nil {
			return st, err
		}
		n := f.n
		if maxEpisodes > 0 {
			n = min(n, maxEpisodes)
		}
		for k := range n {
			if err := page(fmt.Sprintf("run-%d/ep-%d.html", i, k)); err != nil {
				return st, err
			}
			// A page of many agents shows a few; its agents file holds the
			// others, for ?agent=.
			if ep, err := v.episode(i, k); err == nil && len(ep.Seats) > manyAgents {
				js, err := v.agentsJS(ep)
				if err != nil {
					return st, fmt.Errorf("run-%d/ep-%d: %w", i, k, err)
				}
				if err := write(fmt.Sprintf("run-%d/ep-%d.agents.js", i, k), js); err != nil {
					return st, err
				}
			}
			st.Episodes++
		}
		for j := i + 1; j < len(v.files); j++ {
			if err := page(fmt.Sprintf("compare-%d-%d.html", i, j)); err != nil {
				return st, err
			}
		}
	}
	err := fs.WalkDir(assetFS, "assets", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := assetFS.ReadFile(path)
		if err != nil {
			return err
		}
		return write(path, data)
	})
	return st, err
}

package vfstest_test

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/troupe-rl/troupe/internal/atomicfile"
	"github.com/troupe-rl/troupe/internal/vfs"
	"github.com/troupe-rl/troupe/internal/vfs/vfstest"
)

func write(t *testing.T, fsys vfs.FS, path, data string, sync bool) {
	t.Helper()
	f, err := vfs.Create(fsys, path)
	require.NoError(t, err)
	_, err = f.Write([]byte(data))
	require.NoError(t, err)
	if sync {
		require.NoError(t, f.Sync())
	}
	require.NoError(t, f.Close())
}

func read(m *vfstest.Mem, path string) string {
	data, err := m.ReadFile(path)
	if err != nil {
		return "<" + err.Error() + ">"
	}
	return string(data)
}

// A power loss keeps what was synced: a file's bytes by File.Sync, its
// name by SyncDir, and nothing else.
func TestCrashKeepsWhatWasSynced(t *testing.T) {
	m := vfstest.New("/d")
	write(t, m, "/d/synced", "one", true)
	write(t, m, "/d/unsynced", "two", false)
	require.NoError(t, m.SyncDir("/d"))
	f, err := m.OpenFile("/d/synced", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte(" more"))
	require.NoError(t, err)
	require.NoError(t, f.Close())
	write(t, m, "/d/later", "three", true) // synced, its name not
	require.NoError(t, m.MkdirAll("/d/sub/deeper", 0o755))

	m.Crash()
	assert.Equal(t, "one", read(m, "/d/synced"), "the appended bytes were not synced")
	assert.Equal(t, "", read(m, "/d/unsynced"), "its name was synced, its bytes not")
	_, err = m.Stat("/d/later")
	assert.ErrorIs(t, err, fs.ErrNotExist, "its directory was not synced after it was created")
	_, err = m.Stat("/d/sub")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// A rename is durable once its directory is synced; before, a power loss
// leaves the old file.
func TestRenameIsDurableWithItsDirectory(t *testing.T) {
	m := vfstest.New("/d")
	require.NoError(t, atomicfile.Write(m, "/d/f", []byte("old"), 0o644, true))
	require.NoError(t, atomicfile.Write(m, "/d/f", []byte("new"), 0o644, false))
	assert.Equal(t, "new", read(m, "/d/f"))
	c := m.Clone()
	c.Crash()
	assert.Equal(t, "old", read(c, "/d/f"))
	require.NoError(t, atomicfile.Write(m, "/d/f", []byte("newer"), 0o644, true))
	m.Crash()
	assert.Equal(t, "newer", read(m, "/d/f"))
	assert.Equal(t, []string{"/d/f"}, m.Files(), "no temporary file is left")
}

// Each fault fails the call it names, and only that one, as its kind
// says.
func TestFaultsFailTheirCall(t *testing.T) {
	m := vfstest.New("/d")
	m.Inject(vfstest.Fault{Op: vfstest.OpWrite, N: 2, Kind: vfstest.ShortWrite})
	f, err := vfs.Create(m, "/d/f")
	require.NoError(t, err)
	_, err = f.Write([]byte("abcd"))
	require.NoError(t, err)
	n, err := f.Write([]byte("efgh"))
	assert.Equal(t, 2, n)
	assert.ErrorIs(t, err, syscall.ENOSPC)
	assert.True(t, m.Fired())
	_, err = f.Write([]byte("ij"))
	require.NoError(t, err, "only the call named fails")
	assert.Equal(t, "abcdefij", read(m, "/d/f"))
	assert.Equal(t, map[vfstest.Op]int{vfstest.OpOpen: 1, vfstest.OpWrite: 3}, m.Counts())
	assert.False(t, m.Reboot(), "a short write loses no power")
	assert.Equal(t, "abcdefij", read(m, "/d/f"))

	m.Inject(vfstest.Fault{Op: vfstest.OpRename, N: 1, Kind: vfstest.EIO})
	assert.ErrorIs(t, m.Rename("/d/f", "/d/g"), syscall.EIO)
	assert.Equal(t, []string{"/d/f"}, m.Files(), "a failed rename changes nothing")
	m.Reboot()

	// A lying fsync: success, and the bytes are gone after the reboot.
	m.Inject(vfstest.Fault{Op: vfstest.OpSync, N: 1, Kind: vfstest.LostSync})
	write(t, m, "/d/h", "lost", true)
	require.NoError(t, m.SyncDir("/d"))
	assert.True(t, m.Reboot())
	assert.Equal(t, "", read(m, "/d/h"))

	// A power loss fails its call and every one after it.
	m.Inject(vfstest.Fault{Op: vfstest.OpOpen, N: 1, Kind: vfstest.PowerLoss})
	_, err = vfs.Create(m, "/d/i")
	assert.ErrorIs(t, err, vfstest.ErrPoweredOff)
	_, err = m.Stat("/d/f")
	assert.ErrorIs(t, err, vfstest.ErrPoweredOff)
	assert.True(t, m.Reboot())
	assert.Equal(t, []string{"/d/f", "/d/h"}, m.Files(), "i was never created")
	assert.Equal(t, "", read(m, "/d/f"), "f's name was synced with h's, its bytes never")
}

// A torn write keeps the names the cache had and, of each file, what was
// synced and half of what was written since.
func TestTornWriteKeepsHalfTheUnsyncedBytes(t *testing.T) {
	m := vfstest.New("/d")
	write(t, m, "/d/f", "synced", true)
	require.NoError(t, m.SyncDir("/d"))
	f, err := m.OpenFile("/d/f", os.O_WRONLY|os.O_APPEND, 0)
	require.NoError(t, err)
	_, err = f.Write([]byte("1234"))
	require.NoError(t, err)
	m.Inject(vfstest.Fault{Op: vfstest.OpWrite, N: 3, Kind: vfstest.TornWrite}) // calls count from New
	n, err := f.Write([]byte("5678"))
	assert.Equal(t, 2, n)
	assert.ErrorIs(t, err, vfstest.ErrPoweredOff)
	write2, err := vfs.Create(m, "/d/g")
	assert.Nil(t, write2)
	assert.ErrorIs(t, err, vfstest.ErrPoweredOff)
	assert.True(t, m.Reboot())
	assert.Equal(t, "synced123", read(m, "/d/f"), "synced, and half of 123456")
}

// Files read back what was written, at offsets, past the end, cut back.
func TestFilesBehaveAsTheSystemsDo(t *testing.T) {
	m := vfstest.New("/d")
	_, err := m.OpenFile("/d/none", os.O_RDONLY, 0)
	assert.ErrorIs(t, err, fs.ErrNotExist)
	_, err = vfs.Create(m, "/nowhere/f")
	assert.ErrorIs(t, err, fs.ErrNotExist)
	write(t, m, "/d/f", "hello world", false)
	_, err = m.OpenFile("/d/f", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o644)
	assert.ErrorIs(t, err, fs.ErrExist)
	f, err := m.OpenFile("/d/f", os.O_RDWR, 0)
	require.NoError(t, err)
	buf := make([]byte, 5)
	_, err = f.ReadAt(buf, 6)
	require.NoError(t, err)
	assert.Equal(t, "world", string(buf))
	_, err = f.ReadAt(buf, 8)
	assert.ErrorIs(t, err, io.EOF)
	require.NoError(t, f.Truncate(5))
	off, err := f.Seek(0, io.SeekEnd)
	require.NoError(t, err)
	assert.Equal(t, int64(5), off)
	st, err := f.Stat()
	require.NoError(t, err)
	assert.True(t, st.Mode().IsRegular())
	assert.Equal(t, int64(5), st.Size())
	require.NoError(t, f.Close())
	assert.ErrorIs(t, f.Close(), fs.ErrClosed)
	ro, err := vfs.Open(m, "/d/f")
	require.NoError(t, err)
	_, err = ro.Write([]byte("x"))
	assert.True(t, errors.Is(err, syscall.EBADF))
	require.NoError(t, m.MkdirAll("/d/sub", 0o755))
	entries, err := m.ReadDir("/d")
	require.NoError(t, err)
	require.Len(t, entries, 2)
	assert.Equal(t, "f", entries[0].Name())
	assert.True(t, entries[1].IsDir())
	assert.ErrorIs(t, m.Remove("/d"), syscall.ENOTEMPTY)
}

// MkdirAllDurable syncs the directory above each one it creates.
func TestMkdirAllDurableSurvivesAPowerLoss(t *testing.T) {
	m := vfstest.New("/d")
	require.NoError(t, vfs.MkdirAllDurable(m, "/d/a/b", 0o755))
	require.NoError(t, m.MkdirAll("/d/c", 0o755))
	m.Crash()
	st, err := m.Stat("/d/a/b")
	require.NoError(t, err)
	assert.True(t, st.IsDir())
	_, err = m.Stat("/d/c")
	assert.ErrorIs(t, err, fs.ErrNotExist)
}

// The operating system's layer does what package os does.
func TestOS(t *testing.T) {
	dir := t.TempDir()
	fsys := vfs.OS{}
	require.NoError(t, vfs.MkdirAllDurable(fsys, dir+"/a/b", 0o755))
	require.NoError(t, atomicfile.Write(fsys, dir+"/a/b/f", []byte("data"), 0o640, true))
	data, err := vfs.ReadFile(fsys, dir+"/a/b/f")
	require.NoError(t, err)
	assert.Equal(t, "data", string(data))
	st, err := fsys.Stat(dir + "/a/b/f")
	require.NoError(t, err)
	assert.Equal(t, fs.FileMode(0o640), st.Mode().Perm())
	entries, err := fsys.ReadDir(dir + "/a/b")
	require.NoError(t, err)
	assert.Len(t, entries, 1, "no temporary file is left")
	require.NoError(t, fsys.SyncDir(dir))
	assert.Equal(t, vfs.OS{}, vfs.Or(nil))
}

package main

import (
	"github.com/lni/vfs"
)

// newNoSyncFS returns the file system of a replica that runs without
// fsync, as etcd's --unsafe-no-fsync and raft-boltdb's NoSync do.
// dragonboat has no setting for that, but writes everything, its LogDB's
// Pebble instances included, through NodeHostConfig.Expert.FS, a hook for
// its tests: this file system's files do nothing on Sync.
//
// The default LogDB accepts only the file systems of dragonboat's own
// tests there: the operating system's, an in-memory one, and vfs.ErrorFS,
// which wraps another and fails the operations its Injector picks. So the
// files that skip Sync are wrapped in an ErrorFS whose Injector picks
// none. The NodeHost then believes errors are being injected, which
// changes one thing: a step worker that panics stops quietly instead of
// taking the process down.
func newNoSyncFS() vfs.FS {
	return vfs.Wrap(noSyncFS{vfs.Default}, noErrors{})
}

// noErrors is an Injector that injects no error.
type noErrors struct{}

func (noErrors) MaybeError(vfs.Op) error { return nil }

// noSyncFS is a file system whose files do nothing on Sync.
type noSyncFS struct {
	vfs.FS
}

func (fs noSyncFS) Create(name string) (vfs.File, error) {
	return noSync(fs.FS.Create(name))
}

func (fs noSyncFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	return noSync(fs.FS.Open(name, opts...))
}

func (fs noSyncFS) OpenDir(name string) (vfs.File, error) {
	return noSync(fs.FS.OpenDir(name))
}

func (fs noSyncFS) OpenForAppend(name string) (vfs.File, error) {
	return noSync(fs.FS.OpenForAppend(name))
}

func (fs noSyncFS) ReuseForWrite(oldname, newname string) (vfs.File, error) {
	return noSync(fs.FS.ReuseForWrite(oldname, newname))
}

func noSync(f vfs.File, err error) (vfs.File, error) {
	if err != nil {
		return nil, err
	}
	return noSyncFile{f}, nil
}

// noSyncFile is a file whose Sync does nothing.
type noSyncFile struct {
	vfs.File
}

func (noSyncFile) Sync() error { return nil }

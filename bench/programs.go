package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// benchModule is the bench command's module path.
const benchModule = "github.com/convoy-gcs/convoy/bench"

// replicaPrograms returns the executable of each replica program that
// systems run, by system.binary: for "", this program's own; for any
// other name, a program built with go build, into dir, from the module of
// that name in the bench module's directory.
func replicaPrograms(ctx context.Context, systems []system, dir string, log *slog.Logger) (map[string]string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	exes := map[string]string{"": self}
	for _, s := range systems {
		if _, ok := exes[s.binary]; ok {
			continue
		}
		mod, err := moduleDir()
		if err != nil {
			return nil, fmt.Errorf("build the %s replica program: %w", s.binary, err)
		}
		exe := filepath.Join(dir, s.binary+"-replica")
		log.Info("building", "program", s.binary)
		if err := goBuild(ctx, filepath.Join(mod, s.binary), ".", exe); err != nil {
			return nil, fmt.Errorf("build the %s replica program: %w", s.binary, err)
		}
		exes[s.binary] = exe
	}
	return exes, nil
}

// goBuild builds the package pkg of the module in dir into exe, without
// version control stamping, which needs git and a repository git trusts,
// and tells a benchmark program nothing.
func goBuild(ctx context.Context, dir, pkg, exe string) error {
	cmd := exec.CommandContext(ctx, "go", "build", "-buildvcs=false", "-o", exe, pkg)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build %s in %s: %w\n%s", pkg, dir, err, bytes.TrimSpace(out))
	}
	return nil
}

// moduleDir returns the bench module's directory: the working directory
// or the closest of its parents whose go.mod declares benchModule.
func moduleDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && modulePath(b) == benchModule {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the working directory is not in the bench module: run the benchmark from its directory (cd bench)")
		}
		dir = parent
	}
}

// modulePath returns the module path a go.mod file declares, or "".
func modulePath(gomod []byte) string {
	sc := bufio.NewScanner(bytes.NewReader(gomod))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module"); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`)
		}
	}
	return ""
}

// Command dragonboat is the bench command's dragonboat replica: one
// NodeHost of a three-member dragonboat v4 shard whose state machine is an
// in-memory map, serving the bench protocol (package replica). It is a
// module of its own because dragonboat stores its log in Pebble v1, which
// the bench module (on Pebble v2) cannot also depend on. The bench command
// builds it and runs each replica as
//
//	dragonboat replica -kind dragonboat -id N -dir DIR -peers ... -clients ... -durable=BOOL
//
// The replica serves clients once the shard has a leader (it then prints
// the ready line) and exits when its standard input closes.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/lni/dragonboat/v4/logger"

	"github.com/convoy-gcs/convoy/bench/internal/replica"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	if len(os.Args) < 2 || os.Args[1] != replica.Command {
		fmt.Fprintf(os.Stderr, "usage: dragonboat %s -kind dragonboat -id N -dir DIR -peers ADDR,... -clients ADDR,... [-durable=false]\n", replica.Command)
		os.Exit(2)
	}
	logger.SetLoggerFactory(slogFactory(log))
	err := replica.Run(ctx, os.Args[2:], func(ctx context.Context, a replica.Args, ready func() error) error {
		if a.Kind != "dragonboat" {
			return fmt.Errorf("-kind %q: this program runs only dragonboat", a.Kind)
		}
		return runReplica(ctx, a, ready, log)
	})
	if err != nil {
		log.Error("replica failed", "err", err)
		os.Exit(1)
	}
}

package main

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/spf13/cobra"
)

// newFilesCmd serves a directory over HTTP: the lab's release server, from
// which the Argo controller downloads danki's plugin by URL and checks its
// sha256 (lab/scripts/mesh.sh, LAB_ARGO_INSTALL=pod), as from a GitHub
// release.
func newFilesCmd() *cobra.Command {
	var dir, addr string
	cmd := &cobra.Command{
		Use:   "files",
		Short: "Serve a directory over HTTP (the lab's release server: make release's files)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if dir == "" {
				return errors.New("--dir is required: the directory to serve (the lab's: .cache/lab/run/release)")
			}
			ln, err := net.Listen("tcp", addr)
			if err != nil {
				return fmt.Errorf("--addr %s: %w", addr, err)
			}
			srv := &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 10 * time.Second}
			ctx, stop := interruptible(cmd)
			defer stop()
			go func() {
				<-ctx.Done()
				_ = srv.Close()
			}()
			stderrLog(cmd).Info("serving files", "dir", dir, "addr", ln.Addr().String())
			if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
				return err
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&dir, "dir", "", "directory to serve")
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:18098", "address to listen on")
	return cmd
}

package metrics

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Path is where Server serves the metrics.
const Path = "/metrics"

// NewRegistry is a plugin process's registry: the Go runtime's and the
// process's standard collectors, and the plugins' metrics (NewPlugin).
func NewRegistry() (*prometheus.Registry, *Plugin, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	p, err := NewPlugin(reg)
	if err != nil {
		return nil, nil, err
	}
	return reg, p, nil
}

// Server serves a registry's metrics over HTTP on Path.
type Server struct {
	// Addr is the address it listens on (the port chosen, for ":0").
	Addr string
	srv  *http.Server
}

// Serve listens on addr and serves g's metrics in the background until
// Close. Errors while serving are logged to log.
func Serve(addr string, g prometheus.Gatherer, log *slog.Logger) (*Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics endpoint: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle(Path, promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorLog: slogPrinter{log}}))
	s := &Server{Addr: l.Addr().String(), srv: &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}}
	go func() {
		if err := s.srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) && log != nil {
			log.Error("metrics endpoint stopped", "addr", s.Addr, "error", err)
		}
	}()
	return s, nil
}

// Close stops serving.
func (s *Server) Close() error { return s.srv.Close() }

// slogPrinter is promhttp's error log on slog.
type slogPrinter struct{ log *slog.Logger }

func (p slogPrinter) Println(v ...any) {
	if p.log != nil {
		p.log.Error("metrics endpoint", "error", fmt.Sprint(v...))
	}
}

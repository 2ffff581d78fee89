// Command chart-registry serves an in-memory OCI registry on 127.0.0.1 over TLS: the registry of
// github.com/google/go-containerregistry/pkg/registry (the distribution API Helm pushes charts to
// and pulls them from), to which tests/chart_mirror.py pushes the controllers' charts as a mirror of
// registry.k8s.io on loopback.
//
//	chart-registry -cert tls.crt -key tls.key -addr-file addr
//
// It listens on a free port, writes "127.0.0.1:PORT" to -addr-file once it accepts connections
// (through a temporary file and a rename, so a reader never sees a partial address), and serves
// until SIGTERM or SIGINT. Everything pushed lives in memory and is gone when it exits. Each request
// is logged to stderr as one line, "access <method> <path> <status>", so a test can tell what was
// pulled from it; TLS handshake failures appear there too (net/http's error log).
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

func main() {
	certFile := flag.String("cert", "", "PEM serving certificate (for IP 127.0.0.1)")
	keyFile := flag.String("key", "", "PEM private key of -cert")
	addrFile := flag.String("addr-file", "", "file to write the listening address to")
	flag.Parse()
	if *certFile == "" || *keyFile == "" || *addrFile == "" || flag.NArg() != 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*certFile, *keyFile, *addrFile); err != nil {
		log.Fatalf("chart-registry: %v", err)
	}
}

func run(certFile, keyFile, addrFile string) error {
	pair, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return err
	}
	listener, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	server := &http.Server{
		// The registry's own log is verbose and unstructured; accessLog writes one line a request.
		Handler:           accessLog(registry.New(registry.Logger(log.New(io.Discard, "", 0)))),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
	}

	// The listener already queues connections, so the address may be published before Serve runs.
	tmp := addrFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(listener.Addr().String()), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, addrFile); err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	served := make(chan error, 1)
	go func() { served <- server.ServeTLS(listener, "", "") }()
	select {
	case err := <-served:
		return fmt.Errorf("serve: %w", err)
	case <-ctx.Done():
	}
	// A signal: stop accepting, let requests in flight finish (briefly), and exit 0.
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := server.Shutdown(shutdown); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return nil
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (r *statusRecorder) WriteHeader(status int) {
	r.status = status
	r.ResponseWriter.WriteHeader(status)
}

// accessLog logs "access <method> <path> <status>" to stderr once each request has been served.
func accessLog(next http.Handler) http.Handler {
	out := log.New(os.Stderr, "", 0)
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		recorder := &statusRecorder{ResponseWriter: w, status: http.StatusOK}
		next.ServeHTTP(recorder, req)
		out.Printf("access %s %s %d", req.Method, req.URL.Path, recorder.status)
	})
}

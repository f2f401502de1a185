package consumer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// Server is `pgoutput serve` as a child process of the test: started on free loopback
// ports, waited for until it accepts connections, driven through its control API with
// net/http, stopped by the test's cleanup however the test ends.
type Server struct {
	Host, Port string
	Control    string // http://127.0.0.1:PORT
	cmd        *exec.Cmd
	mu         sync.Mutex
	log        strings.Builder
}

var (
	listening   = regexp.MustCompile(`pgoutput serve: listening on (127\.0\.0\.1):(\d+);`)
	controlLine = regexp.MustCompile(`pgoutput serve: control API on (http://\S+)/`)
)

// StartServer starts `pgoutput serve` with these arguments (a script, faults, a probe ...).
// The binary is $PGOUTPUT_BINARY, else `pgoutput` on PATH (pip's environment,
// node_modules/.bin, ~/.cargo/bin).
func StartServer(t *testing.T, args ...string) *Server {
	t.Helper()
	binary := os.Getenv("PGOUTPUT_BINARY")
	if binary == "" {
		binary = "pgoutput"
	}
	s := &Server{cmd: exec.Command(binary, append([]string{"serve", "--listen", "127.0.0.1:0", "--control", "127.0.0.1:0"}, args...)...)}
	stderr, err := s.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Start(); err != nil {
		t.Fatalf("starting %s: %v", binary, err)
	}
	t.Cleanup(s.Close)
	ready := make(chan error, 1)
	go func() {
		lines := bufio.NewScanner(stderr)
		seen := 0
		for lines.Scan() {
			line := lines.Text()
			s.mu.Lock()
			s.log.WriteString(line + "\n")
			if m := listening.FindStringSubmatch(line); m != nil {
				s.Host, s.Port = m[1], m[2]
				seen++
			}
			if m := controlLine.FindStringSubmatch(line); m != nil {
				s.Control = m[1]
				seen++
			}
			s.mu.Unlock()
			if seen == 2 {
				ready <- nil
				seen++
			}
		}
		ready <- fmt.Errorf("pgoutput serve exited before it listened")
	}()
	select {
	case err := <-ready:
		if err != nil {
			t.Fatalf("%v:\n%s", err, s.Log())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("pgoutput serve did not listen within 30 s:\n%s", s.Log())
	}
	return s
}

// ConnString is what pg_recvlogical, libpq and pgx connect with.
func (s *Server) ConnString() string {
	return fmt.Sprintf("host=%s port=%s dbname=postgres user=postgres", s.Host, s.Port)
}

// Log is what the server logged so far: each client, what it asked for, what it confirmed.
func (s *Server) Log() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.log.String()
}

// Call sends a control request (body nil for none) and decodes the JSON answer into out
// (nil to ignore it). A refusal is an error with the status and the server's reason.
func (s *Server) Call(method, path string, body, out any) error {
	var payload io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return err
		}
		payload = bytes.NewReader(encoded)
	}
	request, err := http.NewRequest(method, s.Control+path, payload)
	if err != nil {
		return err
	}
	response, err := http.DefaultClient.Do(request)
	if err != nil {
		return err
	}
	defer response.Body.Close()
	answer, err := io.ReadAll(response.Body)
	if err != nil {
		return err
	}
	if response.StatusCode/100 != 2 {
		var refusal struct {
			Error string `json:"error"`
		}
		_ = json.Unmarshal(answer, &refusal)
		return fmt.Errorf("%s %s: HTTP %d: %s", method, path, response.StatusCode, refusal.Error)
	}
	if out == nil {
		return nil
	}
	return json.Unmarshal(answer, out)
}

// WaitForFlush waits until the consumer confirmed lsn on slot ("" for the WAL end) and
// answers the slot's confirmed flush position; a timeout is an error (HTTP 408).
func (s *Server) WaitForFlush(slot, lsn string, timeout time.Duration) (string, error) {
	request := map[string]any{"slot": slot, "timeout_ms": timeout.Milliseconds()}
	if lsn != "" {
		request["lsn"] = lsn
	}
	var answer struct {
		ConfirmedFlushLSN string `json:"confirmed_flush_lsn"`
	}
	err := s.Call("POST", "/wait", request, &answer)
	return answer.ConfirmedFlushLSN, err
}

// Close stops the server (SIGINT, then SIGKILL after 10 s). Safe to call twice.
func (s *Server) Close() {
	if s.cmd.Process == nil || s.cmd.ProcessState != nil {
		return
	}
	_ = s.cmd.Process.Signal(os.Interrupt)
	done := make(chan struct{})
	go func() { _ = s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = s.cmd.Process.Kill()
		<-done
	}
}

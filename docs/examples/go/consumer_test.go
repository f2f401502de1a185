package consumer

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Table t (id int4 key, v text) in publication p.
const config = `{"publications": [{"name": "p", "tables": [{"oid": 16385, "name": "t",
  "columns": [{"name": "id", "type_oid": 23, "key": true}, {"name": "v", "type_oid": 25}]}]}]}`

// The connection is closed after the first change of transaction 2.
const closeInTransaction2 = `{"when": {"on": "change", "transaction": 2, "after": 1}, "then": {"do": "close"}, "slot": "go"}`

// script is four transactions of two inserts each, ids 1 to 8, as JSON lines.
func script() string {
	var lines strings.Builder
	for id := 1; id <= 8; id += 2 {
		lines.WriteString(`{"type":"begin"}` + "\n")
		for i := id; i <= id+1; i++ {
			fmt.Fprintf(&lines, `{"type":"insert","relation_oid":16385,"new_tuple":[{"text":"%d"},{"text":"v%d"}]}`+"\n", i, i)
		}
		lines.WriteString(`{"type":"commit"}` + "\n")
	}
	return lines.String()
}

// pgRecvlogical is PostgreSQL's own consumer: $PG_RECVLOGICAL, else the one in
// $PGOUTPUT_PG15_BIN, else on PATH.
func pgRecvlogical() string {
	if path := os.Getenv("PG_RECVLOGICAL"); path != "" {
		return path
	}
	if dir := os.Getenv("PGOUTPUT_PG15_BIN"); dir != "" {
		return filepath.Join(dir, "pg_recvlogical")
	}
	return "pg_recvlogical"
}

// The consumer under test is pg_recvlogical: it loses its connection inside transaction
// 2, reconnects by itself (after 5 seconds), and confirms what it wrote every second.
func TestPgRecvlogicalThroughAClose(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	server := StartServer(t, "--config", write("config.json", config), "--script", write("script.jsonl", script()),
		"--fault", closeInTransaction2, "--probe", "1")

	create := exec.Command(pgRecvlogical(), "-d", server.ConnString(), "--slot", "go", "--create-slot", "-P", "pgoutput")
	if out, err := create.CombinedOutput(); err != nil {
		t.Fatalf("pg_recvlogical --create-slot: %v: %s\n%s", err, out, server.Log())
	}
	consumer := exec.Command(pgRecvlogical(), "-d", server.ConnString(), "--slot", "go", "--start",
		"-o", "proto_version=1", "-o", "publication_names=p", "-s", "1", "-F", "1", "-f", filepath.Join(dir, "out"))
	var consumerLog strings.Builder
	consumer.Stderr = &consumerLog
	if err := consumer.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if consumer.ProcessState == nil {
			_ = consumer.Process.Kill()
			_ = consumer.Wait()
		}
	}()

	// Everything the server holds, confirmed: the WAL end.
	var slots []struct {
		Name              string `json:"name"`
		ConfirmedFlushLSN string `json:"confirmed_flush_lsn"`
		WalEnd            string `json:"wal_end"`
	}
	confirmed, err := server.WaitForFlush("go", "", 60*time.Second)
	if err != nil {
		t.Fatalf("%v\npg_recvlogical: %s\n%s", err, consumerLog.String(), server.Log())
	}
	if err := server.Call("GET", "/slots", nil, &slots); err != nil {
		t.Fatal(err)
	}
	if len(slots) != 1 || slots[0].ConfirmedFlushLSN != confirmed || confirmed != slots[0].WalEnd {
		t.Fatalf("confirmed %s; slots %+v", confirmed, slots)
	}

	// pg_recvlogical stops on SIGINT, as on Ctrl-C.
	_ = consumer.Process.Signal(os.Interrupt)
	_ = consumer.Wait()

	var faults []struct {
		Fired int `json:"fired"`
	}
	if err := server.Call("GET", "/faults", nil, &faults); err != nil || len(faults) != 1 || faults[0].Fired != 1 {
		t.Fatalf("faults %+v, %v", faults, err)
	}
	// The judge: nothing wrong, and the stream ended once by the fault.
	var findings []struct {
		Text string `json:"text"`
	}
	if err := server.Call("GET", "/findings", nil, &findings); err != nil || len(findings) != 0 {
		t.Fatalf("findings %+v, %v\n%s", findings, err, server.Log())
	}
	var facts []struct {
		Fact string `json:"fact"`
		How  string `json:"how"`
	}
	var ended []string
	// pg_recvlogical has exited; the server notes its stream's end once it reads the
	// close, which can come after this: wait for the second end (at most 30 s).
	for deadline := time.Now().Add(30 * time.Second); len(ended) < 2 && time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		facts = nil
		if err := server.Call("GET", "/facts", nil, &facts); err != nil {
			t.Fatal(err)
		}
		ended = nil
		for _, fact := range facts {
			if fact.Fact == "ended" {
				ended = append(ended, fact.How)
			}
		}
	}
	if strings.Join(ended, ",") != "fault,client" {
		t.Fatalf("the streams ended %v; facts %+v", ended, facts)
	}
}

// A refused control request carries the server's reason.
func TestControlErrors(t *testing.T) {
	server := StartServer(t)
	err := server.Call("POST", "/faults", map[string]any{"when": map[string]any{"on": "sometime"}, "then": map[string]any{"do": "close"}}, nil)
	if err == nil || !strings.Contains(err.Error(), "HTTP 400: not a fault rule") {
		t.Fatalf("a malformed rule: %v", err)
	}
	if _, err := server.WaitForFlush("nobody", "", 100*time.Millisecond); err == nil || !strings.Contains(err.Error(), "HTTP 408") {
		t.Fatalf("a wait for a slot that never exists: %v", err)
	}
}

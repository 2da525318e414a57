package console

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/keelmq/keel/internal/admin"
)

func getElections(t *testing.T, cfg Config, want int) (electionsAnswer, string) {
	t.Helper()
	ac := admin.New(admin.Config{NamesrvAddrs: []string{"127.0.0.1:1"}}) // never dialled here
	defer ac.Close()
	cfg.Admin = ac
	srv := httptest.NewServer(New(cfg).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/api/elections")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != want {
		t.Fatalf("GET /api/elections: %d, want %d: %s", resp.StatusCode, want, b)
	}
	var a electionsAnswer
	if want == http.StatusOK {
		if err := json.Unmarshal(b, &a); err != nil {
			t.Fatalf("%s: %v", b, err)
		}
	}
	return a, string(b)
}

// TestElectionsAPI: the election history the controllers hold, per group,
// as the page reads it; a broker not in controller mode has none; a
// controller cluster that does not answer is a 502 naming it.
func TestElectionsAPI(t *testing.T) {
	hist := []GroupElections{{Group: "broker-a", MasterID: 2, MasterEpoch: 3, Elections: []Election{
		{TimeMillis: 1000, Epoch: 1, MasterID: 1, Kind: "initial"},
		{TimeMillis: 2000, Epoch: 2, OldMasterID: 1, MasterID: 3, Kind: "clean"},
		{TimeMillis: 3000, Epoch: 3, OldMasterID: 3, MasterID: 2, Kind: "switch-over", Note: "maintenance"},
	}}}
	a, body := getElections(t, Config{Elections: func(context.Context) ([]GroupElections, error) { return hist, nil }}, http.StatusOK)
	if !a.ControllerMode || len(a.Groups) != 1 || len(a.Groups[0].Elections) != 3 {
		t.Fatalf("answer %s", body)
	}
	for _, field := range []string{`"time": 3000`, `"oldMasterId": 3`, `"masterId": 2`, `"kind": "switch-over"`, `"note": "maintenance"`, `"masterEpoch": 3`} {
		if !strings.Contains(body, field) {
			t.Errorf("answer lacks %s: %s", field, body)
		}
	}
	if a, body := getElections(t, Config{}, http.StatusOK); a.ControllerMode || a.Groups == nil || len(a.Groups) != 0 {
		t.Fatalf("without controller mode: %s", body)
	}
	_, body = getElections(t, Config{Elections: func(context.Context) ([]GroupElections, error) {
		return nil, errors.New("no controller answered")
	}}, http.StatusBadGateway)
	if !strings.Contains(body, "controllers: no controller answered") {
		t.Fatalf("502 body %s", body)
	}
}

// TestElectionsOnReplicationPage: the Replication page asks for the
// history and draws a table of it.
func TestElectionsOnReplicationPage(t *testing.T) {
	srv := httptest.NewServer(New(Config{}).Handler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/app.js")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, s := range []string{`api("elections")`, "function electionsPanel", `"Old master"`, `"New master"`, `"Kind"`} {
		if !strings.Contains(string(b), s) {
			t.Errorf("app.js lacks %s", s)
		}
	}
}

package loadtest

import (
	"bufio"
	"fmt"
	"io"
	"net/url"
	"strings"
)

// Account is one customer account the load is spread over: its id (used as
// agent_id in the seed-000 scenarios) and the API key sent as a bearer token.
type Account struct {
	ID  string
	Key string
}

// ReadAccounts parses lines of "account_id key". Blank lines and lines
// starting with '#' are skipped.
func ReadAccounts(r io.Reader) ([]Account, error) {
	var out []Account
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		text := strings.TrimSpace(sc.Text())
		if text == "" || text[0] == '#' {
			continue
		}
		f := strings.Fields(text)
		if len(f) != 2 {
			return nil, fmt.Errorf("accounts line %d: want \"account_id key\", got %d fields", line, len(f))
		}
		out = append(out, Account{ID: f[0], Key: f[1]})
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("accounts: no accounts found")
	}
	return out, nil
}

// WriteAccounts writes accounts in the format ReadAccounts reads.
func WriteAccounts(w io.Writer, accounts []Account) error {
	bw := bufio.NewWriter(w)
	for _, a := range accounts {
		if _, err := fmt.Fprintf(bw, "%s %s\n", a.ID, a.Key); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// SyntheticAccounts returns n accounts named prefix0..prefix(n-1) whose keys
// cycle through keys. It serves runs that need no real credentials, such as
// the baseline server, which answers every request the same way.
func SyntheticAccounts(n int, prefix string, keys []string) ([]Account, error) {
	if n <= 0 {
		return nil, fmt.Errorf("need at least one account, got %d", n)
	}
	if len(keys) == 0 {
		return nil, fmt.Errorf("need at least one key")
	}
	out := make([]Account, n)
	for i := range out {
		out[i] = Account{ID: fmt.Sprintf("%s%d", prefix, i), Key: keys[i%len(keys)]}
	}
	return out, nil
}

// wireAccount is an Account with the encodings the hot path needs computed
// once, so writing a request does no escaping.
type wireAccount struct {
	auth    string // "Bearer <key>"
	queryID string // id escaped for a query string
	jsonID  []byte // id as a JSON string literal, quotes included
}

func newWireAccounts(accounts []Account) []wireAccount {
	out := make([]wireAccount, len(accounts))
	for i, a := range accounts {
		out[i] = wireAccount{
			auth:    "Bearer " + a.Key,
			queryID: url.QueryEscape(a.ID),
			jsonID:  appendJSONString(nil, []byte(a.ID)),
		}
	}
	return out
}

package admin

import (
	"embed"
	"fmt"
	"io/fs"
	"net/http"
	"path"
	"strconv"
)

// The dashboard: a page and its script and style, embedded in the binary
// and served at /ui without the admin token, because they hold no data.
// The page asks the operator for the token, keeps it in the tab's
// sessionStorage and sends it as a Bearer token on every call to the admin
// API and /metrics, which it reads to draw the node (see docs/API.md).
//
// The listener's rules hold here too: GET and HEAD only, every error a
// problem, no redirect (/ui is the page itself, not a redirect to /ui/).

//go:embed ui/index.html ui/app.js ui/app.css
var uiFiles embed.FS

// uiAsset is one embedded file, read once.
type uiAsset struct {
	body        []byte
	contentType string
}

// uiContentTypes are the embedded files' media types, by extension.
var uiContentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
}

// uiSecurityHeaders keep the page from running anything it did not ship
// and from being framed; the token never leaves in a Referer.
var uiSecurityHeaders = map[string]string{
	"Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
		"connect-src 'self'; form-action 'none'; base-uri 'none'; frame-ancestors 'none'",
	"X-Frame-Options":        "DENY",
	"Referrer-Policy":        "no-referrer",
	"X-Content-Type-Options": "nosniff",
	"Cache-Control":          "no-cache",
}

// mountUI serves the dashboard on mux.
func (s *Server) mountUI(mux *http.ServeMux) {
	assets := map[string]uiAsset{}
	err := fs.WalkDir(uiFiles, "ui", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := uiFiles.ReadFile(p)
		if err != nil {
			return err
		}
		assets["/"+p] = uiAsset{body: b, contentType: uiContentTypes[path.Ext(p)]}
		return nil
	})
	if err != nil || assets["/ui/index.html"].body == nil {
		panic(fmt.Sprintf("admin: the embedded dashboard is missing (%v)", err))
	}
	assets["/ui"] = assets["/ui/index.html"]
	assets["/ui/"] = assets["/ui/index.html"]
	serve := s.instrument("/ui", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		a, ok := assets[r.URL.Path]
		switch {
		case !ok:
			s.fail(w, r, problemf(codeNotFound, "no dashboard file %q", r.URL.Path))
			return
		case r.Method != http.MethodGet && r.Method != http.MethodHead:
			w.Header().Set("Allow", "GET, HEAD")
			s.fail(w, r, problemf(codeMethodNotAllowed, "%s allows GET and HEAD", r.URL.Path))
			return
		case r.URL.RawQuery != "":
			s.fail(w, r, problemf(codeInvalidQuery, "%s takes no query parameters", r.URL.Path))
			return
		}
		h := w.Header()
		for k, v := range uiSecurityHeaders {
			h.Set(k, v)
		}
		h.Set("Content-Type", a.contentType)
		h.Set("Content-Length", strconv.Itoa(len(a.body)))
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodGet {
			_, _ = w.Write(a.body)
		}
	}))
	mux.Handle("/ui", serve)
	mux.Handle("/ui/", serve)
}

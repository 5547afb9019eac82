package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// adminFlags are the flags of the commands that read the nodes' admin HTTP listeners. --admin is a
// list: the commands that need the metadata primary (attention, recovery) find it among the list
// themselves, following a node's "not the primary, ask node N" to node N's address in the list.
type adminFlags struct {
	admins  []string
	timeout time.Duration
	asJSON  bool
}

func (f *adminFlags) register(fs *pflag.FlagSet) {
	fs.StringSliceVar(&f.admins, "admin", nil, "admin HTTP addresses of some or all nodes, host:port, comma-separated (env "+
		envAdmin+", then the profile; default "+defaultAdminAddr+")")
	fs.DurationVar(&f.timeout, "timeout", 10*time.Second, "give up on a node after this long")
	fs.BoolVar(&f.asJSON, "json", false, "print the JSON document")
	registerProfileFlag(fs)
}

// addrs is the admin list: --admin, then RINGSTREAM_ADMIN, then the profile's, then the default.
func (f *adminFlags) addrs(cmd *cobra.Command) ([]string, error) {
	list := f.admins
	if !cmd.Flags().Changed("admin") {
		prof, err := loadProfileFor(cmd)
		if err != nil {
			return nil, err
		}
		switch v := os.Getenv(envAdmin); {
		case v != "":
			list = strings.Split(v, ",")
		case prof != nil && len(prof.Admin) > 0:
			list = prof.Admin
		default:
			list = []string{defaultAdminAddr}
		}
	}
	if len(list) == 0 {
		return nil, usageErr(fmt.Errorf("--admin: no address given"))
	}
	for _, a := range list {
		if _, _, err := net.SplitHostPort(a); err != nil {
			return nil, usageErr(fmt.Errorf("--admin %q: want host:port (%v)", a, err))
		}
	}
	if f.timeout <= 0 {
		return nil, usageErr(fmt.Errorf("--timeout %v: must be positive", f.timeout))
	}
	return list, nil
}

// get reads path from the admin listener at addr into v.
func (f *adminFlags) get(ctx context.Context, addr, path string, v any) error {
	_, err := f.do(ctx, http.MethodGet, addr, path, v, true)
	return err
}

// post sends POST path to addr and decodes its JSON answer, whatever its status.
func (f *adminFlags) post(ctx context.Context, addr, path string, v any) (int, error) {
	return f.do(ctx, http.MethodPost, addr, path, v, false)
}

func (f *adminFlags) do(ctx context.Context, method, addr, path string, v any, wantOK bool) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, "http://"+addr+path, nil)
	if err != nil {
		return 0, usageErr(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, &exitError{code: exitUnavailable, err: fmt.Errorf("%s %s at %s: %w", method, path, addr, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, &exitError{code: exitUnavailable, err: fmt.Errorf("%s %s at %s: %w", method, path, addr, err)}
	}
	if wantOK && resp.StatusCode != http.StatusOK {
		return resp.StatusCode, &exitError{code: exitFailure, err: fmt.Errorf("%s %s at %s: %s: %s", method, path, addr,
			resp.Status, strings.TrimSpace(string(body)))}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return resp.StatusCode, &exitError{code: exitFailure, err: fmt.Errorf("%s %s at %s: %s, not the expected JSON: %q",
			method, path, addr, resp.Status, strings.TrimSpace(string(body)))}
	}
	return resp.StatusCode, nil
}

// getFirst reads path from the first address of the list that answers, and says which it was. When
// none answers, the error names each address and why.
func (f *adminFlags) getFirst(ctx context.Context, list []string, path string, v any) (string, error) {
	var errs []string
	for _, a := range list {
		err := f.get(ctx, a, path, v)
		if err == nil {
			return a, nil
		}
		errs = append(errs, err.Error())
	}
	return "", &exitError{code: exitUnavailable, err: fmt.Errorf("no admin listener answered: %s", strings.Join(errs, "; "))}
}

// nodeStatus is one admin address's /v1/status, or why it has none.
type nodeStatus struct {
	Addr   string
	Status *adminapi.Status
	Err    error
}

// statuses reads /v1/status from every address at once, in the list's order.
func (f *adminFlags) statuses(ctx context.Context, list []string) []nodeStatus {
	out := make([]nodeStatus, len(list))
	var wg sync.WaitGroup
	for i, a := range list {
		wg.Go(func() {
			var st adminapi.Status
			out[i].Addr = a
			if err := f.get(ctx, a, "/v1/status", &st); err != nil {
				out[i].Err = err
				return
			}
			out[i].Status = &st
		})
	}
	wg.Wait()
	return out
}

// adminAddrOf is node's admin address among the statuses, or "".
func adminAddrOf(sts []nodeStatus, node uint16) string {
	for _, s := range sts {
		if s.Status != nil && s.Status.Node == node {
			return s.Addr
		}
	}
	return ""
}

// notPrimaryErr is the refusal of a node that is not the metadata primary (exit 8): it names the
// primary, and says its admin address is missing from the list (else the command had followed it).
func notPrimaryErr(primary uint16, list []string) error {
	if primary == 0 {
		return &exitError{code: exitNotPrimary, err: fmt.Errorf("no node of the admin list (%s) is the metadata primary, "+
			"and none knows one now (the metadata group may have no quorum: see `ringstream cluster health`)",
			strings.Join(list, ","))}
	}
	return &exitError{code: exitNotPrimary, err: fmt.Errorf("node %d is the metadata primary, and its admin address is "+
		"not in the admin list (%s): add it to --admin or the profile", primary, strings.Join(list, ","))}
}

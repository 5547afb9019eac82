package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/adminapi"
)

// newRecoveryCommand is `ringstream recovery accept-loss|withdraw`.
func newRecoveryCommand() *cobra.Command {
	cmd := clientCommand(&cobra.Command{
		Use:   "recovery",
		Short: "Operator actions on a stream's pending recovery: accept the owner's loss, or withdraw",
		Long: "Act on a stream whose recovery waits (see `ringstream attention`). Both go to the admin\n" +
			"listener of the metadata primary's node (--admin); another node answers with the primary's id.",
		Args: cobra.NoArgs,
	})
	cmd.AddCommand(newRecoveryActionCommand("accept-loss",
		"Move the stream to a surviving copy without a seal (records may be lost)",
		"Accept that the stream's owner is lost and promote a surviving copy (--owner, or the controller's\n"+
			"proposal) at the tails it last published, without the seal that R copies would have answered.\n"+
			"Records confirmed past those tails are gone: use it only when the missing copies will not come\n"+
			"back. It needs --yes."),
		newRecoveryActionCommand("withdraw",
			"Withdraw the stream's pending recovery; the controller records a new one",
			"Withdraw the stream's pending recovery. The controller then records a replacement (a new\n"+
				"transition at the same fence) before any other change of the stream's assignment."))
	return cmd
}

func newRecoveryActionCommand(action, short, long string) *cobra.Command {
	var f adminFlags
	var owner uint16
	var yes bool
	cmd := clientCommand(&cobra.Command{
		Use:   action + " STREAM",
		Short: short,
		Long:  long,
		Args:  streamArgs("STREAM"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if action == "accept-loss" && !yes {
				return usageErr(fmt.Errorf("accept-loss may lose confirmed records; add --yes to do it"))
			}
			q := url.Values{"stream": {args[0]}}
			if owner != 0 {
				q.Set("owner", strconv.Itoa(int(owner)))
			}
			var res adminapi.RecoveryAction
			status, err := f.post(cmd.Context(), "/v1/recovery/"+action+"?"+q.Encode(), &res)
			if err != nil {
				return err
			}
			if f.asJSON {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			}
			if status != http.StatusOK || !res.Done {
				return recoveryErr(status, &res)
			}
			if !f.asJSON {
				fmt.Fprintf(cmd.OutOrStdout(), "%s of stream %q (id %d, recovery %d) committed at metadata op %d", action,
					res.Stream, res.StreamID, res.Recovery, res.Op)
				if res.Owner != 0 {
					fmt.Fprintf(cmd.OutOrStdout(), ": node %d owns it now", res.Owner)
				}
				fmt.Fprintln(cmd.OutOrStdout())
				if res.Warning != "" {
					fmt.Fprintf(cmd.ErrOrStderr(), "warning: %s\n", res.Warning)
				}
			}
			return nil
		},
	})
	f.register(cmd.Flags())
	if action == "accept-loss" {
		cmd.Flags().Uint16Var(&owner, "owner", 0, "the node to promote (default: the controller's proposal)")
		cmd.Flags().BoolVar(&yes, "yes", false, "confirm: records confirmed past the new owner's tails are lost")
	}
	return cmd
}

// recoveryErr gives a refused action its exit status and a message saying what to do.
func recoveryErr(status int, res *adminapi.RecoveryAction) error {
	msg := res.Error
	if msg == "" {
		msg = res.Result
	}
	err := fmt.Errorf("recovery %s of %q refused (HTTP %d): %s", res.Action, res.Stream, status, msg)
	switch {
	case res.Primary != 0:
		// Only the metadata primary acts on a recovery, and only it may say a stream is unknown: a
		// backup's state may trail it. So a backup's answer is "ask the primary", whatever the stream.
		return &exitError{code: exitNotPrimary, err: fmt.Errorf("%w; ask node %d, the metadata primary", err, res.Primary)}
	case strings.Contains(msg, "not the metadata primary"):
		return &exitError{code: exitNotPrimary, err: fmt.Errorf("%w; ask the metadata primary's admin listener", err)}
	case status == http.StatusBadRequest:
		return usageErr(err)
	case strings.Contains(msg, "no stream") || strings.Contains(msg, "no pending recovery"):
		return &exitError{code: exitNotFound, err: err}
	case status == http.StatusServiceUnavailable:
		return &exitError{code: exitUnavailable, err: err}
	}
	return &exitError{code: exitFailure, err: err}
}

// post sends POST path to the admin listener and decodes its JSON answer, whatever its status.
func (f *adminFlags) post(ctx context.Context, path string, v any) (int, error) {
	if _, _, err := net.SplitHostPort(f.admin); err != nil {
		return 0, usageErr(fmt.Errorf("--admin %q: want host:port (%v)", f.admin, err))
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+f.admin+path, nil)
	if err != nil {
		return 0, usageErr(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, &exitError{code: exitUnavailable, err: fmt.Errorf("POST %s to %s: %w", path, f.admin, err)}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return 0, &exitError{code: exitUnavailable, err: fmt.Errorf("POST %s to %s: %w", path, f.admin, err)}
	}
	if err := json.Unmarshal(body, v); err != nil {
		return 0, &exitError{code: exitFailure, err: fmt.Errorf("POST %s to %s: %s, not the expected JSON: %q", path,
			f.admin, resp.Status, strings.TrimSpace(string(body)))}
	}
	return resp.StatusCode, nil
}

package main

import (
	"fmt"
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
			list, err := f.addrs(cmd)
			if err != nil {
				return err
			}
			res, status, err := postToPrimary(cmd, &f, list, "/v1/recovery/"+action+"?"+q.Encode())
			if err != nil {
				return err
			}
			if f.asJSON {
				if err := writeJSON(cmd.OutOrStdout(), res); err != nil {
					return err
				}
			}
			if status != http.StatusOK || !res.Done {
				return recoveryErr(status, res, list)
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

// postToPrimary sends the action to the metadata primary: it asks the list's first address that
// answers, and follows a "not the primary" refusal to the primary's admin address in the list (or, with
// no primary named, to the next address of the list). It returns the last answer.
func postToPrimary(cmd *cobra.Command, f *adminFlags, list []string, path string) (*adminapi.RecoveryAction, int, error) {
	tried := map[string]bool{}
	var sts []nodeStatus // read once, when a refusal must be followed
	next := list[0]
	var lastErr error
	for next != "" {
		tried[next] = true
		var res adminapi.RecoveryAction
		status, err := f.post(cmd.Context(), next, path, &res)
		if err != nil {
			lastErr = err
			next = untried(list, tried)
			continue
		}
		if res.Done || !refusedAsBackup(&res) {
			return &res, status, nil
		}
		if sts == nil {
			sts = f.statuses(cmd.Context(), list)
		}
		asked := res.Primary
		follow := ""
		if res.Primary != 0 {
			follow = adminAddrOf(sts, res.Primary)
		}
		if follow == "" || tried[follow] {
			follow = untried(list, tried)
		}
		if follow == "" {
			return &res, status, nil // recoveryErr names the primary and what is missing
		}
		fmt.Fprintf(cmd.ErrOrStderr(), "%s is not the metadata primary (it names node %d); asking %s\n", next, asked, follow)
		next = follow
	}
	return nil, 0, lastErr
}

// refusedAsBackup says the node refused because it is not the metadata primary.
func refusedAsBackup(res *adminapi.RecoveryAction) bool {
	return res.Primary != 0 || strings.Contains(res.Error, "not the metadata primary") ||
		strings.Contains(res.Result, "not the metadata primary")
}

// untried is the list's first address not tried yet, or "".
func untried(list []string, tried map[string]bool) string {
	for _, a := range list {
		if !tried[a] {
			return a
		}
	}
	return ""
}

// recoveryErr gives a refused action its exit status and a message saying what to do.
func recoveryErr(status int, res *adminapi.RecoveryAction, list []string) error {
	msg := res.Error
	if msg == "" {
		msg = res.Result
	}
	err := fmt.Errorf("recovery %s of %q refused (HTTP %d): %s", res.Action, res.Stream, status, msg)
	switch {
	case refusedAsBackup(res):
		// Only the metadata primary acts on a recovery, and only it may say a stream is unknown: a
		// backup's state may trail it. So a backup's answer is "ask the primary", whatever the stream.
		return fmt.Errorf("%w: %w", err, notPrimaryErr(res.Primary, list))
	case status == http.StatusBadRequest:
		return usageErr(err)
	case strings.Contains(msg, "no stream") || strings.Contains(msg, "no pending recovery"):
		return &exitError{code: exitNotFound, err: err}
	case status == http.StatusServiceUnavailable:
		return &exitError{code: exitUnavailable, err: err}
	}
	return &exitError{code: exitFailure, err: err}
}

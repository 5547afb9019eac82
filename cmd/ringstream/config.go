package main

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/ringstream/ringstream/engine/config"
)

// newConfigCommand is `ringstream config defaults|check`.
func newConfigCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Print the default node configuration, or check a configuration file",
		Args:  cobra.NoArgs,
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "defaults",
		Short: "Print every option with its default and a comment, as a TOML file that loads as it is",
		Long: "Print every option of a node's TOML file with its default value and a comment saying what it\n" +
			"does. The output describes node 1 of a three-node cluster on this host and passes\n" +
			"`ringstream config check` unchanged; copy it and edit what differs.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return config.WriteDefaults(cmd.OutOrStdout())
		},
	})
	cmd.AddCommand(newConfigCheckCommand())
	return cmd
}

// checkResult is `config check --json`'s output.
type checkResult struct {
	Config   string   `json:"config"`
	Valid    bool     `json:"valid"`
	Error    string   `json:"error,omitempty"`
	Warnings []string `json:"warnings"`
	Node     uint16   `json:"node,omitempty"`
	Cluster  uint64   `json:"cluster,omitempty"`
	Shards   int      `json:"shards,omitempty"`
}

// newConfigCheckCommand is `ringstream config check --config F [--json]`: exit 0 when F loads (its
// warnings printed), 9 when it does not (the error names the key and the rule), 2 on a usage error.
func newConfigCheckCommand() *cobra.Command {
	var path string
	var asJSON bool
	cmd := &cobra.Command{
		Use:          "check --config FILE",
		SilenceUsage: true,
		Short:        "Load and validate a node configuration file; print its warnings",
		Long: "Load and validate a node's TOML file as `ringstream serve` would, and print what it allows\n" +
			"but advises against. Exit status: 0 valid (warnings may be printed), 9 invalid (the error\n" +
			"names the key and the rule), 2 usage error.",
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if path == "" {
				return usageErr(errors.New("config check: --config is required"))
			}
			res := checkResult{Config: path, Warnings: []string{}}
			c, loadErr := config.Load(path)
			if loadErr == nil {
				res.Valid, res.Warnings = true, append(res.Warnings, c.Warnings...)
				res.Node, res.Cluster, res.Shards = c.File.Node.ID, c.File.Cluster.ID, c.ShardCount
			} else {
				res.Error = loadErr.Error()
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				if err := enc.Encode(res); err != nil {
					return err
				}
			} else {
				for _, w := range res.Warnings {
					fmt.Fprintf(out, "warning: %s\n", w)
				}
				if res.Valid {
					fmt.Fprintf(out, "%s: valid: node %d of cluster %d, %d shards, %d warning(s)\n", path, res.Node,
						res.Cluster, res.Shards, len(res.Warnings))
				}
			}
			if loadErr != nil {
				return &exitError{code: exitCheckInvalid, err: loadErr}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&path, "config", "", "the node's TOML file")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

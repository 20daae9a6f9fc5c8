package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/sluicehq/sluice/pipelines/trades"
	"github.com/sluicehq/sluice/topics"
)

// tradesSettings reads the trades pipeline's environment:
// TRADES_IMPORT_DEDUPE_WINDOW (a Go duration, default 1h),
// BROKER_TOKEN_KEY (32 bytes in hex or base64; unset: coinbase and binance
// imports cannot run) and BROKER_RATE_LIMIT_SAFETY_MS (milliseconds,
// default 250). Errors never contain the token key.
func tradesSettings() (trades.Config, error) {
	var c trades.Config
	var errs []error
	if v := envOr("TRADES_IMPORT_DEDUPE_WINDOW", ""); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			errs = append(errs, fmt.Errorf("invalid TRADES_IMPORT_DEDUPE_WINDOW=%q (want a duration > 0, e.g. 1h)", v))
		}
		c.Import.DedupeWindow = d
	}
	if v := envOr("BROKER_RATE_LIMIT_SAFETY_MS", ""); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			errs = append(errs, fmt.Errorf("invalid BROKER_RATE_LIMIT_SAFETY_MS=%q (want milliseconds ≥ 0)", v))
		}
		c.Import.RateLimitSafety = time.Duration(ms) * time.Millisecond
		if ms == 0 {
			c.Import.RateLimitSafety = time.Nanosecond // 0 asks for no margin; the zero value means the default
		}
	}
	if v := os.Getenv("BROKER_TOKEN_KEY"); strings.TrimSpace(v) != "" {
		key, err := trades.ParseTokenKey(v)
		if err != nil {
			errs = append(errs, err)
		}
		c.Import.TokenKey = key
	}
	// AI_* and TRADES_DIGEST_* are read when the pipeline is built.
	c.Getenv = os.Getenv
	return c, errors.Join(errs...)
}

// tradesOptions are the flags shared by the trades subcommands.
type tradesOptions struct {
	importTopic, stateTopic string
}

// register adds --state-topic to cmd, and with imports (a command that
// sends import commands) --import-topic.
func (o *tradesOptions) register(cmd *cobra.Command, imports bool) {
	f := cmd.Flags()
	f.StringVar(&o.stateTopic, "state-topic", topics.TradesImportState, "trades-import state topic (compacted, co-partitioned with the command topic)")
	if imports {
		f.StringVar(&o.importTopic, "import-topic", topics.TradesImport, "trades command topic")
	}
}

func (o *tradesOptions) config() trades.ImportConfig {
	return trades.ImportConfig{ImportTopic: o.importTopic, StateTopic: o.stateTopic}
}

func newTradesCmd(g *globalConfig) *cobra.Command {
	o := &tradesOptions{}
	cmd := commandGroup("trades", "Import users' broker trades, inspect imports, ask for scores, digests and sims (pipeline trades)",
		newTradesImportCmd(g, o), newTradesStatusCmd(g, o),
		newTradesScoreCmd(g), newTradesDigestCmd(g), newTradesRebuildDigestsCmd(g), newTradesSimCmd(g))
	return cmd
}

func newTradesImportCmd(g *globalConfig, o *tradesOptions) *cobra.Command {
	var req trades.ImportRequest
	var api string
	cmd := &cobra.Command{
		Use:   "import USER",
		Short: "Send an import command for USER's trades and print its import_id",
		Long: `import sends {"kind":"import","user_id","since","broker","force"} on the
trades command topic; the trades-import member owning the user's partition
runs it page by page. Without --since the import reaches back 30 days from
today (UTC), resolved here before the import id is hashed, so that sending
the same command again names the same import. An import that is running is
not started twice; one completed within TRADES_IMPORT_DEDUPE_WINDOW is not
run again unless --force. With --api the request goes to a running process's
POST /api/v1/trades/imports instead of straight to Kafka, with
Authorization: Bearer $SLUICE_API_TOKEN when it is set.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			req.UserID = args[0]
			// Resolve and check here, as the API would: bad input is
			// reported before connecting.
			c, err := req.Command(time.Now())
			if err != nil {
				return err
			}
			req.Since, req.Broker = c.Since, c.Broker
			var res trades.ImportResult
			if api != "" {
				res, err = tradesImportHTTP(cmd.Context(), api, req)
			} else {
				res, err = tradesImportKafka(cmd.Context(), g, o, req)
			}
			if err != nil {
				return err
			}
			fmt.Fprintln(cmd.OutOrStdout(), res.ImportID)
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Since, "since", "", "first day (YYYY-MM-DD, or RFC 3339) of the trades to import (default: UTC today − 30 days)")
	cmd.Flags().StringVar(&req.Broker, "broker", trades.BrokerSynthetic, "broker: synthetic, coinbase or binance (coinbase and binance need an active broker connection)")
	cmd.Flags().BoolVar(&req.Force, "force", false, "run again even if the same import completed within TRADES_IMPORT_DEDUPE_WINDOW")
	cmd.Flags().StringVar(&api, "api", "", "base URL of a running sluice ops server, e.g. http://127.0.0.1:9464")
	o.register(cmd, true)
	return g.withServiceFlags(cmd, kafkaFlags)
}

func tradesImportKafka(ctx context.Context, g *globalConfig, o *tradesOptions, req trades.ImportRequest) (trades.ImportResult, error) {
	return withKafkaClient(ctx, g, func(ctx context.Context, cl *kgo.Client, kopts []kgo.Opt) (trades.ImportResult, error) {
		return trades.NewImports(cl, kopts, o.config()).Import(ctx, req)
	})
}

func tradesImportHTTP(ctx context.Context, base string, req trades.ImportRequest) (trades.ImportResult, error) {
	var res trades.ImportResult
	err := postAPI(ctx, "trades import", base, "/api/v1/trades/imports", req, &res)
	return res, err
}

func newTradesStatusCmd(g *globalConfig, o *tradesOptions) *cobra.Command {
	var user string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "status IMPORT_ID|--user USER",
		Short: "Show an import's state, or every import of a user",
		Long: `status reads the compacted import-state topic to its end and shows the
import's status (RUNNING, COMPLETED or FAILED), run, pages done and trade
counts (fetched, stored, rejected), and for a failed run its reason and rule.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (len(args) == 1) == (user != "") {
				return errors.New("give either IMPORT_ID or --user USER")
			}
			if len(args) == 1 {
				if err := trades.CheckImportID(args[0]); err != nil {
					return err
				}
			}
			kopts, err := kafkaOpts(cmd.Context(), g)
			if err != nil {
				return err
			}
			ctx, cancel := context.WithTimeout(cmd.Context(), 30*time.Second)
			defer cancel()
			all, err := trades.ReadImports(ctx, kopts, o.stateTopic)
			if err != nil {
				return err
			}
			var list []trades.ImportState
			if len(args) == 1 {
				st, ok := all[args[0]]
				if !ok {
					return fmt.Errorf("no import %s in %s", args[0], o.stateTopic)
				}
				list = append(list, st)
			} else if list = trades.UserImports(all, user); len(list) == 0 {
				return fmt.Errorf("no import of user %s in %s", user, o.stateTopic)
			}
			return printImports(cmd.OutOrStdout(), list, asJSON)
		},
	}
	cmd.Flags().StringVar(&user, "user", "", "list every import of this user, the latest started first")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON, one state per line")
	o.register(cmd, false)
	return g.withServiceFlags(cmd, kafkaFlags)
}

// printImports prints import states in the given order.
func printImports(w io.Writer, list []trades.ImportState, asJSON bool) error {
	if asJSON {
		enc := json.NewEncoder(w)
		for _, st := range list {
			if err := enc.Encode(st); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "IMPORT_ID\tUSER\tKIND\tBROKER\tSINCE\tSTATUS\tRUN_ID\tPAGES\tFETCHED\tSTORED\tREJECTED\tRULE")
	for _, st := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%d\t%d\t%d\t%s\n", st.ImportID, st.UserID, st.Kind, st.Broker,
			orDash(st.Since), st.Status, st.RunID, st.Page, st.Fetched, st.Stored, st.Rejected, orDash(st.Rule))
	}
	return tw.Flush()
}

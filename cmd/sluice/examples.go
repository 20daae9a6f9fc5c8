package main

import "github.com/spf13/cobra"

// commandExamples is the Examples section of every command's help, by
// command path: one to three invocations, each naming its own command path
// (a comment line starts with #), consistent with the README and docs/.
func commandExamples() map[string]string {
	return map[string]string{
		"sluice": `  sluice demo --keep        # every pipeline on embedded services, then explore
  sluice lag --group silver
  sluice run silver ticks smap`,
		"sluice run": `  sluice run silver ticks smap       # all three in one process, until SIGINT/SIGTERM
  sluice run silver --ops-addr 127.0.0.1:9465 --console 127.0.0.1:8080
  sluice run silver --topic-prefix P --group-prefix G   # an isolated copy on a shared cluster`,
		"sluice demo": `  sluice demo
  sluice demo --keep                 # stay up for kcat, the console and other sluice commands
  sluice demo --records 2000 --smap-items 30 --timeout 2m`,
		"sluice console": `  sluice console                     # http://127.0.0.1:8080/, read-only
  # writes (redrive) need the token; a non-loopback address needs it too
  SLUICE_CONSOLE_TOKEN="$TOKEN" sluice console --addr 0.0.0.0:8080`,
		"sluice topics": `  sluice topics ensure
  sluice topics list -v`,
		"sluice topics ensure": `  sluice topics ensure
  sluice topics ensure --partitions-override bronze.records=12
  sluice topics ensure --prefix P    # an isolated copy of the catalog`,
		"sluice topics list": `  sluice topics list
  sluice topics list bronze.records -v   # per-partition offsets
  sluice topics list --all`,
		"sluice migrate": `  sluice migrate
  sluice migrate --status`,
		"sluice replay": `  sluice replay --group silver --topic bronze.records --to-earliest
  sluice replay --group silver --topic bronze.records --to-time 2024-05-02T00:00:00Z --dry-run
  sluice replay --group silver --topic bronze.records --to-time -1h`,
		"sluice lag": `  sluice lag
  sluice lag --group silver
  sluice lag --group silver --brokers localhost:9092`,
		"sluice dlq": `  sluice dlq inspect --reason sanity_fail
  sluice dlq redrive --rule ta.volume --dry-run`,
		"sluice dlq inspect": `  sluice dlq inspect --limit 5
  sluice dlq inspect --reason sanity_fail --rule ta.price_relation   # what failed, and why
  sluice dlq inspect --since -1h --json`,
		"sluice dlq redrive": `  sluice dlq redrive --rule ta.volume --dry-run   # after a fix: what would be re-sent
  sluice dlq redrive --rule ta.volume             # re-publish to the source topic and partition
  sluice dlq redrive --all --dry-run`,
		"sluice dlq archive": `  sluice dlq archive --once          # DLQ → Postgres dlq_archive, then exit
  sluice dlq archive --topic bronze.dlq --group dlq-archive`,
		"sluice smap": `  sluice smap progress PROJECT_ID
  sluice smap rebuild-progress PROJECT_ID`,
		"sluice smap progress": `  sluice smap progress PROJECT_ID          # live progress bar until DONE
  sluice smap progress PROJECT_ID --json   # once, as JSON`,
		"sluice smap rebuild-progress": `  sluice smap rebuild-progress PROJECT_ID  # Redis lost it: rebuild from post_analytics`,
		"sluice ingest": `  sluice ingest trigger NQ 2025-11-18 --account U12345
  sluice ingest status`,
		"sluice ingest trigger": `  sluice ingest trigger NQ 2025-11-18 --account U12345
  sluice ingest trigger AAPL 2024-05-02 --api http://127.0.0.1:9464   # through a running server`,
		"sluice ingest status": `  sluice ingest status               # status, cursor, progress, heartbeat age of every job
  sluice ingest status NQ:2025-11-18 --json`,
		"sluice ingest bootstrap": `  sluice ingest bootstrap            # rebuild lost job states from the object store`,
		"sluice version":          `  sluice version`,
		"sluice trades": `  sluice trades import u1
  sluice trades status --user u1`,
		"sluice trades import": `  sluice trades import u1            # prints the import_id
  sluice trades import u1 --since 2025-01-01 --broker synthetic --force`,
		"sluice trades status": `  sluice trades status --user u1
  sluice trades status IMPORT_ID --json`,
		"sluice trades score": `  sluice trades score u1 --since 2025-01-01`,
		"sluice trades digest": `  sluice trades digest u1 --week 2025-W02
  sluice trades digest u1 --week "$(date -u +%G-W%V)"   # this week's digest so far`,
		"sluice trades rebuild-digests": `  sluice trades rebuild-digests u1
  sluice trades rebuild-digests u1 --since 2025-01-01`,
		"sluice trades sim": `  sluice trades sim u1 TRADE_ID --horizon-days 7   # hold vs actual P/L of one trade
  sluice trades sim u1 TRADE_ID --json`,
		"sluice modules": `  sluice modules analyze NVDA
  sluice modules status NVDA`,
		"sluice modules refresh": `  sluice modules refresh NVDA options_flow --wait 30s
  sluice modules refresh NVDA dark_pool --force
  sluice modules refresh NVDA options_flow --api http://127.0.0.1:9464`,
		"sluice modules status": `  sluice modules status NVDA
  sluice modules status NVDA --module dark_pool --json`,
		"sluice modules analyze": `  sluice modules analyze NVDA
  sluice modules analyze NVDA --modules options_flow,dark_pool --json`,
		"sluice modules jobs": `  sluice modules jobs JOB_ID         # pending, done or failed, with its modules`,
		"sluice modules catalog": `  sluice modules catalog             # freshness thresholds and TTLs per module
  sluice modules catalog --json`,
	}
}

// setExamples sets the Example of root and of every command under it from
// commandExamples.
func setExamples(root *cobra.Command) {
	ex := commandExamples()
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if e, ok := ex[c.CommandPath()]; ok {
			c.Example = e
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

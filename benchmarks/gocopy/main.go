// Command gocopy is the franz-go copy loop of the replicator's benchmark (benchmarks/run.py,
// contender "franz-go"): the reference a Go program sets for copying a topic between
// clusters with no replicator features at all.
//
// It consumes every partition of the source topic from its start (no consumer group, no
// offsets committed), adds one header to each record (16 bytes of value by default) and
// produces it, key, value, timestamp and headers kept, to the same partition number of the
// destination topic on every destination cluster: one idempotent producer per cluster,
// acks=all, no compression, large batches (1 MiB, 5 ms linger by default). Once every
// destination has acknowledged --records records, it prints one JSON line (records, seconds
// from the first record fetched to the latest acknowledged, versions) and exits, or with --stay
// waits for SIGTERM first (the benchmark watches its CPU time and memory in /proc until it
// stops it).
//
//	gocopy --source 127.0.0.1:9092 --destinations 127.0.0.1:9093 --topic bench --records 3000000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// settings are the loop's flags, printed with its figures.
type settings struct {
	Source             string        `json:"source"`
	Destinations       []string      `json:"destinations"`
	SourceTopic        string        `json:"source_topic"`
	Topic              string        `json:"topic"`
	Records            int64         `json:"records"`
	HeaderKey          string        `json:"header_key"`
	HeaderValue        string        `json:"header_value"`
	BatchMaxBytes      int           `json:"batch_max_bytes"`
	Linger             time.Duration `json:"-"`
	LingerMs           float64       `json:"linger_ms"`
	MaxBufferedRecords int           `json:"max_buffered_records"`
	FetchMaxBytes      int           `json:"fetch_max_bytes"`
	FetchPartitionMax  int           `json:"fetch_max_partition_bytes"`
	Stay               bool          `json:"stay"`
}

func parse() settings {
	var s settings
	var destinations string
	flag.StringVar(&s.Source, "source", "", "the source cluster's bootstrap servers (comma-separated)")
	flag.StringVar(&destinations, "destinations", "",
		"the destination clusters' bootstrap servers: clusters separated by ';', "+
			"servers of one cluster by ','; every record is written to every cluster")
	flag.StringVar(&s.SourceTopic, "source-topic", "", "the topic read (default: --topic)")
	flag.StringVar(&s.Topic, "topic", "bench", "the topic written on every destination")
	flag.Int64Var(&s.Records, "records", 0,
		"stop once every destination acknowledged this many records (0: copy until stopped)")
	flag.StringVar(&s.HeaderKey, "header-key", "gocopy", "the name of the header added")
	flag.StringVar(&s.HeaderValue, "header-value", "0123456789abcdef", "its value (16 bytes)")
	flag.IntVar(&s.BatchMaxBytes, "batch-max-bytes", 1<<20, "the producers' largest batch")
	flag.DurationVar(&s.Linger, "linger", 5*time.Millisecond, "the producers' linger")
	flag.IntVar(&s.MaxBufferedRecords, "max-buffered-records", 500_000,
		"records each producer holds unacknowledged before a produce call blocks")
	flag.IntVar(&s.FetchMaxBytes, "fetch-max-bytes", 50<<20, "the consumer's fetch.max.bytes")
	flag.IntVar(&s.FetchPartitionMax, "fetch-max-partition-bytes", 1<<20,
		"the consumer's max.partition.fetch.bytes")
	flag.BoolVar(&s.Stay, "stay", false, "once done, wait for SIGTERM before exiting")
	flag.Parse()
	if s.Source == "" || destinations == "" {
		fmt.Fprintln(os.Stderr, "gocopy: --source and --destinations are required")
		flag.Usage()
		os.Exit(2)
	}
	for _, cluster := range strings.Split(destinations, ";") {
		if cluster = strings.TrimSpace(cluster); cluster != "" {
			s.Destinations = append(s.Destinations, cluster)
		}
	}
	if s.SourceTopic == "" {
		s.SourceTopic = s.Topic
	}
	s.LingerMs = float64(s.Linger) / float64(time.Millisecond)
	return s
}

// destination is one destination cluster's producer and what it acknowledged.
type destination struct {
	client *kgo.Client
	acked  atomic.Int64
	done   chan struct{}
}

func main() {
	s := parse()
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()

	consumer, err := kgo.NewClient(
		kgo.SeedBrokers(strings.Split(s.Source, ",")...),
		kgo.ConsumeTopics(s.SourceTopic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchMaxBytes(int32(s.FetchMaxBytes)),
		kgo.FetchMaxPartitionBytes(int32(s.FetchPartitionMax)),
	)
	fail(err)
	defer consumer.Close()

	failed := make(chan error, 1)
	destinations := make([]*destination, len(s.Destinations))
	for i, servers := range s.Destinations {
		client, err := kgo.NewClient(
			kgo.SeedBrokers(strings.Split(servers, ",")...),
			kgo.DefaultProduceTopic(s.Topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()),
			kgo.RequiredAcks(kgo.AllISRAcks()), // idempotent: franz-go's default with acks=all
			kgo.ProducerBatchCompression(kgo.NoCompression()),
			kgo.ProducerBatchMaxBytes(int32(s.BatchMaxBytes)),
			kgo.ProducerLinger(s.Linger),
			kgo.MaxBufferedRecords(s.MaxBufferedRecords),
		)
		fail(err)
		defer client.Close()
		destinations[i] = &destination{client: client, done: make(chan struct{})}
	}

	header := kgo.RecordHeader{Key: s.HeaderKey, Value: []byte(s.HeaderValue)}
	var first time.Time
	var last atomic.Int64 // unix nanoseconds of the latest acknowledgement
	var consumed int64
	allDone := make(chan struct{})
	polling, stopPolling := context.WithCancel(ctx) // a poll waiting for records ends when done
	defer stopPolling()
	go func() {
		for _, d := range destinations {
			<-d.done
		}
		close(allDone)
		stopPolling()
	}()

	copying := func() error {
		for {
			fetches := consumer.PollFetches(polling)
			if polling.Err() != nil {
				return nil
			}
			var errs []error
			fetches.EachError(func(topic string, partition int32, err error) {
				errs = append(errs, fmt.Errorf("fetch %s[%d]: %w", topic, partition, err))
			})
			if len(errs) > 0 {
				return errs[0]
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if first.IsZero() {
					first = time.Now()
				}
				consumed++
				headers := make([]kgo.RecordHeader, len(r.Headers), len(r.Headers)+1)
				copy(headers, r.Headers)
				headers = append(headers, header)
				for _, d := range destinations {
					out := &kgo.Record{
						Key:       r.Key,
						Value:     r.Value,
						Headers:   headers,
						Timestamp: r.Timestamp,
						Topic:     s.Topic,
						Partition: r.Partition,
					}
					d.client.Produce(ctx, out, acknowledged(ctx, d, s.Records, &last, failed))
				}
			})
			select {
			case err := <-failed:
				return err
			case <-allDone:
				return nil
			default:
			}
		}
	}
	if err := copying(); err != nil {
		fail(err)
	}
	select {
	case <-allDone:
	case err := <-failed:
		fail(err)
	case <-ctx.Done():
	}
	report(s, destinations, first, time.Unix(0, last.Load()), consumed)
	if s.Stay {
		<-ctx.Done()
	}
}

// acknowledged is the produce callback for destination d: it counts the record, and closes
// d.done once want records are in (or fails the run, unless ctx was cancelled).
func acknowledged(
	ctx context.Context, d *destination, want int64, last *atomic.Int64, failed chan<- error,
) func(*kgo.Record, error) {
	return func(r *kgo.Record, err error) {
		if err != nil && ctx.Err() != nil {
			return // stopped by a signal: the records still buffered are abandoned
		}
		if err != nil {
			select {
			case failed <- fmt.Errorf("produce %s[%d]: %w", r.Topic, r.Partition, err):
			default:
			}
			return
		}
		last.Store(time.Now().UnixNano()) // the last acknowledgement, whenever it stops
		if n := d.acked.Add(1); want > 0 && n == want {
			close(d.done)
		}
	}
}

func report(s settings, destinations []*destination, first, last time.Time, consumed int64) {
	acked := make([]int64, len(destinations))
	copied := int64(-1) // records every destination acknowledged
	for i, d := range destinations {
		acked[i] = d.acked.Load()
		if copied < 0 || acked[i] < copied {
			copied = acked[i]
		}
	}
	seconds := 0.0
	if !first.IsZero() && last.After(first) {
		seconds = last.Sub(first).Seconds()
	}
	perSecond := 0.0
	if seconds > 0 {
		perSecond = float64(copied) / seconds
	}
	line, err := json.Marshal(map[string]any{
		"records":            copied,
		"wanted":             s.Records,
		"consumed":           consumed,
		"acknowledged":       acked,
		"seconds":            seconds,
		"records_per_second": perSecond,
		"franz_go":           moduleVersion("github.com/twmb/franz-go"),
		"go":                 runtime.Version(),
		"settings":           s,
	})
	fail(err)
	fmt.Println(string(line))
}

// moduleVersion is the version of the module at path this binary was built with.
func moduleVersion(path string) string {
	if info, ok := debug.ReadBuildInfo(); ok {
		for _, dep := range info.Deps {
			if dep.Path == path {
				return dep.Version
			}
		}
	}
	return "unknown"
}

func fail(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "gocopy:", err)
		os.Exit(1)
	}
}

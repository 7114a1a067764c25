// TensorFlow event files, composed: `runhooks::EventFileWriter` (summary/event_file_writer.hpp),
// which appends scalar summaries and session logs to a file TensorBoard reads, and
// `runhooks::EventFileWriterCache` (summary/event_writer_cache.hpp), which gives every hook writing
// to one directory the same writer, as TensorFlow's FileWriterCache. The protobuf wire, the
// Event encoding and the TFRecord framing are in summary/detail/; Histogram and SummaryEncoder in
// summary/histogram.hpp and summary/summary_encoder.hpp.
#pragma once

#include <runhooks/detail/config.hpp>

#include <runhooks/summary/detail/event_encoding.hpp>
#include <runhooks/summary/detail/protobuf_wire.hpp>
#include <runhooks/summary/detail/record_framing.hpp>
#include <runhooks/summary/event_file_writer.hpp>
#include <runhooks/summary/event_writer_cache.hpp>

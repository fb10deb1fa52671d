#pragma once
// Subcommand registry. Each command file adds its subcommand and a run function.
#include <CLI/CLI.hpp>
#include <functional>

namespace hypic::app {

void register_commands(CLI::App& app);
// Runs the subcommand that was parsed; returns the process exit code.
int run_selected(CLI::App& app);

// Used by each command file: attach `run` to `sub` (called when sub was parsed).
void on_run(CLI::App* sub, std::function<int()> run);

// For a count option where 0 means "any" or "all": refuses negative numbers at parsing
// (CLI11 would wrap "-3" into a huge unsigned count).
CLI::Validator non_negative_count();

// `--byte-tokenizer`: a model folder without tokenizer.json may turn text into one token
// per byte; without the flag such a folder refuses text (Tokenizer::Fallback).
void add_byte_tokenizer_flag(CLI::App* sub, bool* byte_tokenizer);

// Command groups, one file each.
void add_info_command(CLI::App& app);
void add_model_commands(CLI::App& app);
void add_model_check_command(CLI::App& model);  // `model check`, registered by add_model_commands
void add_forward_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_bench_commands(CLI::App& app);
// Bench subcommands, one file each, registered by add_bench_commands.
void add_bench_compose(CLI::App& bench);
void add_bench_tokenize(CLI::App& bench);
void add_bench_scaling(CLI::App& bench);  // cold query across ranks: measured and simulated
void add_bench_kernels(CLI::App& bench);  // per-op times at several thread counts
void add_bench_peak(CLI::App& bench);     // floating-point peak per instruction set
void add_warmup_command(CLI::App& app);
void add_serve_command(CLI::App& app);
void add_inspect_command(CLI::App& app);
void add_store_commands(CLI::App& app);  // `store merge`
void add_bench_ttft(CLI::App& bench);    // a `hypic bench` subcommand
void add_bench_qps(CLI::App& bench);     // sustainable QPS under a TTFT SLA
void add_eval_command(CLI::App& app);
void add_chat_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);

}  // namespace hypic::app

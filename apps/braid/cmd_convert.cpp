// `braid export` and `braid import`: a trained model out of braid into the
// formats the ecosystem reads (Hugging Face, llm.c), and back.
#include <cstdio>
#include <filesystem>
#include <map>
#include <string>

#include "braid/commands.h"
#include "braid/core/error.h"
#include "braid/data/tokenizer.h"
#include "braid/formats/gpt2_weights.h"

namespace braid::cli {

namespace {


struct ConvertOptions {
  std::string checkpoint, format, out, source, tokenizer_dir;
};

void describe(const char* verb, const formats::ModelWeights& w, const std::string& where) {
  const auto& c = w.config;
  std::printf("%s %s: model %s (L=%lld H=%lld C=%lld V=%lld, block %lld), %.2fM parameters\n", verb, where.c_str(),
              w.model.c_str(), (long long)c.n_layer, (long long)c.n_head, (long long)c.n_embd,
              (long long)c.vocab_size, (long long)c.block_size,
              static_cast<double>(w.params.size()) / 1e6);
}

void run_export(const ConvertOptions& o) {
  const formats::ModelWeights w = formats::read_checkpoint_weights(o.checkpoint);
  if (o.format == "hf") {
    formats::export_hf(w, o.out, o.tokenizer_dir);
    const bool gpt2 = w.config.is_gpt2_block();
    describe(gpt2 ? "wrote Hugging Face GPT2LMHeadModel" : "wrote Hugging Face LlamaForCausalLM", w,
             o.out + (gpt2 ? " (model.safetensors, config.json, vocab.json, merges.txt)"
                           : " (model.safetensors, config.json, vocab.json, merges.txt, tokenizer_config.json)"));
  } else {
    formats::export_llmc(w, o.out);
    describe("wrote llm.c model file", w, o.out);
  }
}

void run_import(const ConvertOptions& o) {
  const formats::ModelWeights w = o.format == "hf" ? formats::import_hf(o.source) : formats::import_llmc(o.source);
  formats::write_imported_checkpoint(o.out, w, o.format);
  describe("wrote braid checkpoint", w, o.out + " (step 0, fresh AdamW state; from " + o.source + ")");
}

}  // namespace

void add_export(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  o->tokenizer_dir = data::Gpt2Tokenizer::default_dir();
  CLI::App* c = app.add_subcommand("export", "Write a checkpoint's model in another format: a Hugging Face directory or an llm.c model file");
  c->add_option("--checkpoint", o->checkpoint, "braid checkpoint to read (a file or a sharded step_<N> directory)")->required()->check(CLI::ExistingPath);
  c->add_option("--format", o->format, "hf: a GPT2LMHeadModel (GPT-2 blocks) or LlamaForCausalLM (Llama blocks) directory (model.safetensors, config.json, tokenizer files); llmc: llm.c's fp32 model file (GPT-2 blocks)")
      ->required()
      ->transform(one_of({"hf", "llmc"}));
  c->add_option("out", o->out, "Output: a directory (hf) or a file (llmc)")->required();
  c->add_option("--tokenizer-dir", o->tokenizer_dir, "Directory with encoder.json and vocab.bpe (hf: copied as vocab.json and merges.txt)")
      ->capture_default_str()
      ->check(CLI::ExistingDirectory);
  c->callback([o] { run_export(*o); });
}

void add_import(CLI::App& app) {
  auto o = std::make_shared<ConvertOptions>();
  CLI::App* c = app.add_subcommand("import", "Make a braid checkpoint from a Hugging Face GPT-2 or Llama directory or an llm.c model file");
  c->add_option("--format", o->format, "hf: a GPT-2 or Llama directory (config.json, and model.safetensors or the shards model.safetensors.index.json names); llmc: an llm.c model file (version 3 or 5)")
      ->required()
      ->transform(one_of({"hf", "llmc"}));
  c->add_option("source", o->source, "The directory (hf) or file (llmc) to read")->required()->check(CLI::ExistingPath);
  c->add_option("--out", o->out, "braid checkpoint to write (step 0: `braid train --resume` fine-tunes it)")->required();
  c->callback([o] { run_import(*o); });
}

}  // namespace braid::cli

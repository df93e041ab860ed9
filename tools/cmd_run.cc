// graphrun run: runs a model forward on the CPU with inputs from .npy/.pb files; prints and saves its outputs.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>

#include "graph/onnx_io.h"
#include "graph/tensor_io.h"
#include "graph/validate.h"
#include "runtime/data/fit.h"
#include "runtime/data/image.h"
#include "runtime/device.h"
#include "runtime/executor.h"
#include "runtime/plan.h"
#include "tools/cli.h"

namespace graphrun::cli {

namespace {

const Command& run_command() {
  static const Command cmd{
      "run",
      "graphrun run MODEL.onnx --input NAME=FILE [--input NAME=FILE ...] [options]",
      "Runs MODEL.onnx forward on the CPU and prints each output (name, dtype, shape, first values).",
      {
          {"input", "NAME=FILE",
           "a model input from a .npy or .pb file, or a PNG/JPEG image for an image\n"
           "                            input; repeat for each input, or list them with commas (a\n"
           "                            comma followed by neither NAME= nor an existing file is part\n"
           "                            of the path); a model with one input also takes --input FILE",
           true},
          {"normalize", "MEAN,STD",
           "image inputs: feed (x - MEAN) / STD, as train --normalize did; per channel\n"
           "                            M1,M2,M3/S1,S2,S3"},
          {"output-dir", "DIR",
           "write each output to DIR/<output>.npy (created if missing); a bfloat16\n"
           "                            output, which numpy has no type for, to DIR/<output>.pb"},
          {"threads", "N", "intra-op threads (default 1)"},
          {"profile", "FILE",
           "write a Chrome trace of the run (every node's kernel) to FILE and print the\n"
           "                            ops by total time (README: Profiling)"},
      },
      "Inputs must have the dtype the model declares and a shape that matches its known dimensions.\n"
      "The run's buffers may take 90% of the memory available: inputs too large for it are refused in one\n"
      "line (before any kernel runs where the shapes of the model's values say so).\n"
      "float16 inputs come as .npy ('<f2') or .pb; bfloat16 inputs as .pb (an ONNX TensorProto of\n"
      "data_type BFLOAT16, the bits in raw_data or in int32_data).\n"
      "An image (.png, .jpg, .jpeg) feeds an f32 [N,C,H,W] or [C,H,W] input (C 1 or 3, H and W known) as\n"
      "training reads an image folder: converted to C channels as PIL's convert, resized to H x W\n"
      "(bilinear), pixels / 255, then --normalize; a batch of one.\n"
      "Output names are made safe as file names: characters other than letters, digits, '.', '-' and\n"
      "'_' become '_'.\n"
      "An If or Loop whose condition or trip count the small integer or bool inputs decide (a flag, a\n"
      "count) is decided by the values given: taken or unrolled for this run, as stderr says. A\n"
      "condition or count computed from the inputs (if x.sum() > 0) is computed by running the part of\n"
      "the model before it on them, then taken or unrolled likewise; a Loop whose body decides when to\n"
      "stop (a while on the data) is unrolled as many times as the data say. A node of opsets 18 to 28\n"
      "whose opset-17 form needs a constant such an input gives (ReduceMean-18's axes) is rewritten with\n"
      "the values given, for this run.\n"
      "A sequence input comes as a .pb holding an ONNX SequenceProto (onnx.numpy_helper.from_list), or as\n"
      "its tensors, --input NAME=FILE once per element in order (--input xs=a.npy --input xs=b.npy); an\n"
      "optional input as a .pb holding an OptionalProto, or a .npy for an optional tensor; an optional\n"
      "input left out holds no value. The model is then taken for those lists (its sequence ops become\n"
      "the tensors they hold). A sequence or optional output prints one line per element, NAME[0], ...,\n"
      "and --output-dir writes it whole as DIR/<output>.pb (a SequenceProto or OptionalProto).\n"
      "\nexample:\n  graphrun run models/lenet.onnx --input image=x.npy --output-dir out/   # writes out/logits.npy"};
  return cmd;
}

std::string join(const std::vector<std::string>& v) {
  std::string r;
  for (const auto& s : v) r += (r.empty() ? "" : ", ") + s;
  return r.empty() ? "none" : r;
}

// --input's items. A value is a comma-separated list, but a path may hold commas: it splits at a comma
// only where what follows starts a new item, NAME= (NAME a model input, or a name without '/') or an
// existing file, and not where the rest of the value is an existing file's path; elsewhere the comma
// stays in the path ("x=dir,with,comma/x.npy" is one item).
std::vector<std::string> input_items(const Args& args, const Graph& g) {
  auto starts_item = [&](const std::string& piece) {
    const size_t eq = piece.find('=');
    if (eq != std::string::npos && eq > 0) {
      const std::string name = piece.substr(0, eq);
      if (g.is_input(name) || name.find_first_of("/\\") == std::string::npos) return true;
    }
    std::error_code ec;
    return piece.empty() || std::filesystem::exists(piece, ec);
  };
  std::vector<std::string> items;
  for (const std::string& value : args.given("input")) {
    std::vector<std::string> pieces;
    for (size_t at = 0;;) {
      const size_t comma = value.find(',', at);
      pieces.push_back(value.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    // The file an item names (after NAME= where NAME is an input).
    auto file_of = [&](const std::string& item) {
      const size_t eq = item.find('=');
      return eq != std::string::npos && g.is_input(item.substr(0, eq)) ? item.substr(eq + 1) : item;
    };
    std::string cur = pieces[0];
    for (size_t i = 1; i < pieces.size(); ++i) {
      std::string rest = cur;  // the item, were the rest of the value its path
      for (size_t k = i; k < pieces.size(); ++k) rest += "," + pieces[k];
      std::error_code ec;
      if (std::filesystem::is_regular_file(file_of(rest), ec)) {
        cur = rest;
        break;
      }
      if (starts_item(pieces[i])) {
        if (!cur.empty()) items.push_back(cur);
        cur = pieces[i];
      } else {
        cur += "," + pieces[i];
      }
    }
    if (!cur.empty()) items.push_back(cur);
  }
  return items;
}

// Pairs each --input with a model input: NAME=FILE, or a bare FILE when the model has one input. The inputs in
// `optional` may be left out (an optional input without a value). A name in `sequences` may come several times, its
// files in `lists` in order (the first also in the result).
std::map<std::string, std::string> input_files(const Args& args, const Graph& g, const std::string& model,
                                               const std::set<std::string>& optional = {},
                                               const std::set<std::string>& sequences = {},
                                               std::map<std::string, std::vector<std::string>>* lists = nullptr) {
  std::map<std::string, std::string> files;
  for (const auto& spec : input_items(args, g)) {
    std::string name, file;
    auto eq = spec.find('=');
    if (eq != std::string::npos && g.is_input(spec.substr(0, eq))) {
      name = spec.substr(0, eq);
      file = spec.substr(eq + 1);
    } else if (eq != std::string::npos && !(g.inputs.size() == 1 && std::filesystem::exists(spec))) {
      throw Error(args.usage_error("'" + spec.substr(0, eq) + "' is not an input of " + model +
                                   " (its inputs: " + join(g.inputs) + ")"));
    } else if (g.inputs.size() == 1) {
      name = g.inputs[0];
      file = spec;
    } else {
      throw Error(args.usage_error("--input " + spec + " needs a name: " + model + " has inputs " + join(g.inputs) +
                                   "; write --input NAME=FILE"));
    }
    if (file.empty()) throw Error(args.usage_error("--input " + spec + " names no file"));
    if (lists && sequences.count(name)) (*lists)[name].push_back(file);
    if (files.count(name) && sequences.count(name)) continue;
    if (files.count(name)) throw Error(args.usage_error("input '" + name + "' given twice"));
    files[name] = file;
  }
  std::vector<std::string> missing;
  for (const auto& in : g.inputs)
    if (!files.count(in) && !optional.count(in)) missing.push_back(in);
  if (!missing.empty())
    throw Error(args.usage_error("missing input" + std::string(missing.size() > 1 ? "s " : " ") + join(missing) +
                                 " of " + model + " (give --input NAME=FILE for each)"));
  return files;
}

// The executor checks this too; checking here lets the message name the file.
void check_input(const Graph& g, const std::string& name, const std::string& file, const Tensor& t) {
  const ValueInfo* vi = g.info(name);
  if (!vi) return;
  bool ok = vi->dtype == DType::Undefined || vi->dtype == t.dtype();
  if (ok && vi->has_shape) {
    ok = static_cast<int>(vi->shape.size()) == t.rank();
    for (int d = 0; ok && d < t.rank(); ++d) ok = !vi->shape[d].known() || vi->shape[d].size == t.dim(d);
  }
  GR_CHECK(ok, "input '" << name << "' from " << file << " is " << dtype_name(t.dtype()) << shape_str(t.shape())
                         << ", but the model expects " << vi->str()
                         << (vi->dtype == DType::BF16 && t.dtype() != DType::BF16
                                 ? " (numpy has no bfloat16: give a .pb TensorProto of data_type BFLOAT16)"
                                 : ""));
}

// Whether `path` ends in `ext` (".pb"), as written.
bool has_extension(const std::string& path, const std::string& ext) {
  return path.size() >= ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0;
}

bool is_image_file(const std::string& path) {
  std::string e = std::filesystem::path(path).extension().string();
  std::transform(e.begin(), e.end(), e.begin(), [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  return e == ".png" || e == ".jpg" || e == ".jpeg";
}

// --normalize: MEAN,STD for every channel, or one per channel (M1,M2,M3/S1,S2,S3).
runtime::data::Normalize parse_run_normalize(const Args& args) {
  runtime::data::Normalize n;
  if (!args.has("normalize")) return n;
  const std::string text = args.get("normalize");
  std::string per = text;
  if (text.find('/') == std::string::npos) {
    const size_t comma = text.find(',');
    if (comma == std::string::npos || text.find(',', comma + 1) != std::string::npos)
      throw Error(args.usage_error("--normalize takes MEAN,STD or M1,M2,M3/S1,S2,S3, got '" + text + "'"));
    per = text.substr(0, comma) + "/" + text.substr(comma + 1);
  }
  try {
    return runtime::data::parse_normalize(per);
  } catch (const Error& e) {
    throw Error(args.usage_error(e.what()));
  }
}

// A PNG/JPEG file as the model's image input: f32 [1,C,H,W] (or [C,H,W]) as training reads an image folder.
Tensor read_image_input(const Graph& g, const std::string& name, const std::string& file,
                        const runtime::data::Normalize& norm) {
  const ValueInfo* vi = g.info(name);
  const int rank = vi && vi->has_shape ? static_cast<int>(vi->shape.size()) : 0;
  bool ok = vi && (vi->dtype == DType::F32 || vi->dtype == DType::Undefined) && (rank == 3 || rank == 4);
  for (int d = rank - 3; ok && d < rank; ++d) ok = vi->shape[d].known();
  ok = ok && (vi->shape[rank - 3].size == 1 || vi->shape[rank - 3].size == 3) &&
       (rank == 3 || !vi->shape[0].known() || vi->shape[0].size == 1);
  GR_CHECK(ok, "input '" << name << "' is " << (vi ? vi->str() : std::string("of unknown type"))
                         << ": an image file (" << file << ") feeds an f32 [N,C,H,W] or [C,H,W] input, C 1 or 3, H and W known");
  const int64_t C = vi->shape[rank - 3].size, H = vi->shape[rank - 2].size, W = vi->shape[rank - 1].size;
  GR_CHECK(norm.empty() || norm.mean.size() == 1 || static_cast<int64_t>(norm.mean.size()) == C,
           "--normalize gives " << norm.mean.size() << " means but input '" << name << "' has " << C << " channels");
  std::ifstream f(file, std::ios::binary);
  GR_CHECK(f, "image '" << file << "' cannot be read");
  const std::vector<unsigned char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  runtime::data::Image img;
  runtime::data::decode_image(bytes.data(), bytes.size(), "image '" + file + "'", img);
  Tensor t(DType::F32, rank == 4 ? Shape{1, C, H, W} : Shape{C, H, W});
  float* p = t.data<float>();
  runtime::data::image_to_chw(img, C, H, W, p);
  if (!norm.empty())
    for (int64_t c = 0; c < C; ++c) {
      const size_t k = norm.mean.size() == 1 ? 0 : static_cast<size_t>(c);
      const float mean = norm.mean[k], inv = 1.0f / norm.std[k];
      for (int64_t i = 0; i < H * W; ++i) p[c * H * W + i] = (p[c * H * W + i] - mean) * inv;
    }
  return t;
}

// An output name as a safe file name: "/fc2/Gemm_output_0" -> "_fc2_Gemm_output_0".
std::string safe_file_name(const std::string& name) {
  std::string r;
  for (char c : name) {
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
              c == '.';
    r += ok ? c : '_';
  }
  if (r.empty() || r[0] == '.') r = "_" + r;
  return r;
}

// Inputs too large for this machine stop in one line (before any kernel runs where the shapes of the model's values
// say so), not in the out-of-memory killer: the run's buffers may take 90% of the memory available once the model and
// the inputs are loaded.
void limit_memory(runtime::ExecOptions& opts) {
  if (const size_t free = runtime::backend_for(Device::Kind::CPU)->free_memory(Device{})) {
    opts.memory_limit = runtime::run_memory_limit(free);
    opts.memory_hint = "this machine had " + runtime::bytes_str(static_cast<double>(free)) +
                       " available; run the model on fewer examples at a time";
  }
}

// An output as the file declares it: a tensor output of the graph, or a sequence or optional (`slot`) whose
// elements the graph outputs.
struct Shown {
  std::string name;
  const CompositeSlot* slot = nullptr;
};

// The model's outputs in the file's order.
std::vector<Shown> shown_outputs(const Graph& g) {
  std::set<std::string> parts;
  for (const auto& slot : g.composite_outputs) parts.insert(slot.parts.begin(), slot.parts.end());
  std::vector<Shown> r;
  for (const auto& name : g.outputs)
    if (!parts.count(name)) r.push_back({name, nullptr});
  for (const auto& slot : g.composite_outputs)  // in order of position
    r.insert(r.begin() + std::min<size_t>(static_cast<size_t>(slot.position), r.size()), Shown{slot.name, &slot});
  return r;
}

}  // namespace

int cmd_run(const std::vector<std::string>& argv) {
  const Command& cmd = run_command();
  Args args(cmd, argv);
  if (args.help()) {
    std::cout << cmd.help();
    return 0;
  }
  if (args.positional().size() != 1)
    throw Error(args.usage_error(args.positional().empty() ? "no model given" : "expected one model file, got " +
                                                                                    std::to_string(args.positional().size())));
  const std::string model = args.positional()[0];
  const int64_t threads = args.get_int("threads", 1);
  if (threads < 1 || threads > 1024) throw Error(args.usage_error("--threads must be between 1 and 1024"));

  const runtime::data::Normalize norm = parse_run_normalize(args);
  Graph g;
  bool decided_by_values = false, composite = false, lowered_by_values = false;
  try {
    g = load_onnx(model);
  } catch (const Error& e) {
    // Control flow that the inputs decide (an If on a flag input, a Loop over a count input) is decided by this
    // run's values, and sequence and optional inputs and outputs are followed for this run's values: the model
    // loads again with its small integer and bool inputs and its sequence and optional inputs known. So does a
    // node of opsets 18 to 28 whose opset-17 form needs a constant an input gives (ReduceMean-18's axes input).
    const std::string why = e.what();
    decided_by_values = why.find("depends on the input data") != std::string::npos;
    composite = why.find(kSequenceRefusal) != std::string::npos;
    lowered_by_values = why.find("cannot be read as opset") != std::string::npos;
    if (!decided_by_values && !composite && !lowered_by_values) throw;
  }
  std::map<std::string, std::string> files;
  std::map<std::string, CompositeValue> composite_values;
  std::map<std::string, std::vector<std::string>> lists;  // a sequence input's files, one per element
  std::map<std::string, Tensor> read;  // the inputs read already
  if (decided_by_values || composite || lowered_by_values) {
    Graph shell;
    std::set<std::string> optional;
    std::map<std::string, std::string> declared;  // composite inputs: their declared type
    for (const auto& in : onnx_inputs(model)) {
      shell.inputs.push_back(in.name);
      shell.values[in.name] = in.info;
      if (!in.composite.empty()) declared[in.name] = in.composite;
      if (in.composite.rfind("optional", 0) == 0) optional.insert(in.name);
    }
    std::set<std::string> sequences;
    for (const auto& [name, type] : declared)
      if (type == "sequence") sequences.insert(name);
    files = input_files(args, shell, model, optional, sequences, &lists);
    KnownInputs known;
    for (const auto& [name, file] : files) {
      const bool pb = has_extension(file, ".pb");
      if (auto l = lists.find(name); l != lists.end() && (l->second.size() > 1 || !pb)) {
        // A sequence given as its tensors, one --input each, in order (.npy, or .pb TensorProto files).
        CompositeValue v;
        for (const auto& f : l->second) v.tensors.push_back(read_tensor_file(f, name));
        GR_CHECK(static_cast<int64_t>(v.tensors.size()) <= kMaxSequenceLength,
                 "input '" << name << "' is a sequence of " << v.tensors.size() << " tensors; graphrun takes at most "
                           << kMaxSequenceLength << " (each becomes an input of the graph)");
        known.composite[name] = std::move(v);
        continue;
      }
      if (auto d = declared.find(name); d != declared.end()) {
        // A sequence from a SequenceProto .pb; an optional from an OptionalProto .pb, or a tensor file (a value).
        if (d->second == "optional" && has_extension(file, ".npy")) {
          CompositeValue v;
          v.optional = true;
          v.sequence = false;
          v.tensors.push_back(read_npy(file));
          known.composite[name] = std::move(v);
        } else if (d->second != "unsupported") {
          GR_CHECK(
              pb, "input '" << name << "' is " << (d->second == "sequence" ? "a " : "an ") << d->second << ": " << file
                            << " is not a .pb file holding an ONNX "
                            << (d->second == "sequence" ? "SequenceProto (onnx.numpy_helper.from_list writes one)"
                                                        : "OptionalProto (onnx.numpy_helper.from_optional writes one), "
                                                          "nor a .npy tensor for an optional tensor"));
          known.composite[name] = read_composite_pb(file, d->second != "sequence", name);
        }
        continue;
      }
      try {
        Tensor t = is_image_file(file) ? read_image_input(shell, name, file, norm) : read_tensor_file(file, name);
        if (small_control_value(t)) known.small[name] = t;
        known.tensors[name] = std::move(t);
      } catch (const Error&) {
        // read again below, where its error is reported
      }
    }
    known.compute = [threads](Graph part, const std::map<std::string, Tensor>& feeds) {
      runtime::ExecOptions o;
      o.fetch = part.outputs;
      o.threads = static_cast<int>(threads);
      limit_memory(o);  // as the run itself
      return runtime::Executor(std::move(part), o).run(feeds);
    };
    g = load_onnx(model, known);
    if ((decided_by_values || lowered_by_values) && !known.small.empty()) {
      std::string names;
      for (const auto& [name, t] : known.small) names += (names.empty() ? "'" : ", '") + name + "'";
      std::cerr << "graphrun run: " << model << ": "
                << (decided_by_values ? "control flow decided" : "nodes of a newer opset written in opset 17")
                << " by the values of " << names << " for this run\n";
    }
    composite_values = std::move(known.composite);
    read = std::move(known.tensors);
  } else {
    files = input_files(args, g, model);
  }
  std::map<std::string, Tensor> feeds;
  bool image = false;
  for (const auto& [name, file] : files) {
    if (composite_values.count(name)) {
      const CompositeValue& v = composite_values.at(name);
      // A sequence given as its tensors names each element's file; one .pb names the file that held them all.
      auto l = lists.find(name);
      for (const auto& slot : g.composite_inputs)
        if (slot.name == name)
          for (size_t k = 0; k < slot.parts.size(); ++k) {
            const bool each = l != lists.end() && l->second.size() == slot.parts.size();
            check_input(g, slot.parts[k], each ? l->second[k] : file, v.tensors.at(k));
            feeds[slot.parts[k]] = v.tensors[k];
          }
      continue;
    }
    const bool is_image = is_image_file(file);
    image |= is_image;
    Tensor t = read.count(name) ? std::move(read.at(name))
               : is_image       ? read_image_input(g, name, file, norm)
                                : read_tensor_file(file, name);
    check_input(g, name, file, t);
    feeds[name] = std::move(t);
  }
  if (!norm.empty() && !image) throw Error(args.usage_error("--normalize applies to image inputs, and no --input is an image"));

  runtime::ExecOptions opts;
  opts.threads = static_cast<int>(threads);
  limit_memory(opts);
  const std::string profile_path = args.get("profile");
  runtime::Profiler profiler;
  // The files the run writes: --profile, and each output's in --output-dir (DIR/<output>.npy, or .pb for
  // bfloat16; a name that repeats after safe_file_name gets _2, _3). None may be a file it reads, nor
  // one another.
  const std::string dir = args.get("output-dir");
  const std::vector<Shown> shown = shown_outputs(g);
  std::vector<std::string> out_files;  // per output shown, its file's name without the extension
  for (const auto& o : shown) {
    std::string base = safe_file_name(o.name), file = base;
    for (int k = 2; std::find(out_files.begin(), out_files.end(), file) != out_files.end(); ++k)
      file = base + "_" + std::to_string(k);
    out_files.push_back(file);
  }
  {
    std::vector<PathUse> inputs{{"the model", model}};
    for (const auto& [name, file] : files) inputs.push_back({"--input " + name, file});
    std::vector<PathUse> outputs{{"--profile", profile_path}};
    if (!dir.empty())
      for (const auto& file : out_files)
        for (const char* ext : {".npy", ".pb"})
          outputs.push_back({"--output-dir", (std::filesystem::path(dir) / (file + ext)).string()});
    check_distinct_paths(inputs, outputs);
  }
  if (!profile_path.empty()) {
    check_output_path("--profile", profile_path);  // an unwritable path fails before the run, the file unchanged
    opts.profile = &profiler.track("run (cpu:0)");
  }
  std::unique_ptr<runtime::Executor> ex;
  try {
    ex = std::make_unique<runtime::Executor>(std::move(g), opts);  // the weights are held once
  } catch (const Error& e) {
    GR_FAIL(model << ": " << e.what());
  }
  std::map<std::string, Tensor> out;
  {
    runtime::ProfileScope scope(opts.profile, "run", "phase");
    out = ex->run(feeds);
  }
  if (opts.profile) profiler.finish(profile_path, "run", std::cout);

  if (!dir.empty()) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    GR_CHECK(!ec && std::filesystem::is_directory(dir), "--output-dir " << dir << ": cannot create the folder"
                                                                         << (ec ? " (" + ec.message() + ")" : ""));
  }
  for (size_t i = 0; i < shown.size(); ++i) {
    const Shown& o = shown[i];
    const std::string path = dir.empty() ? std::string() : (std::filesystem::path(dir) / out_files[i]).string();
    if (!o.slot) {
      const Tensor& t = out.at(o.name);
      std::cout << o.name << ": " << t.str(6);
      if (!dir.empty()) {
        const bool pb = t.dtype() == DType::BF16;  // numpy has no bfloat16
        if (pb)
          write_tensor_pb(path + ".pb", t, o.name);
        else
          write_npy(path + ".npy", t);
        std::cout << "  -> " << path << (pb ? ".pb" : ".npy");
      }
      std::cout << "\n";
      continue;
    }
    // A sequence or an optional: a line of its own, then one per element; written whole as one .pb.
    const CompositeSlot& slot = *o.slot;
    CompositeValue v;
    v.optional = slot.type != "sequence";
    v.sequence = slot.type != "optional";
    v.none = slot.none;
    for (const auto& part : slot.parts) v.tensors.push_back(out.at(part));
    std::cout << o.name << ": ";
    if (slot.none)
      std::cout << slot.type << " without a value";
    else if (v.sequence)
      std::cout << (v.optional ? "optional holding a sequence of " : "sequence of ") << v.tensors.size() << " tensor"
                << (v.tensors.size() == 1 ? "" : "s");
    else
      std::cout << "optional holding a tensor";
    if (!dir.empty()) {
      write_composite_pb(path + ".pb", v, o.name);
      std::cout << "  -> " << path << ".pb";
    }
    std::cout << "\n";
    for (size_t k = 0; k < v.tensors.size(); ++k)
      std::cout << "  " << slot.parts[k] << ": " << v.tensors[k].str(6) << "\n";
  }
  return 0;
}

}  // namespace graphrun::cli

#include <doctest/doctest.h>

#include <whisper/model.hpp>
#include <whisper/onednn_bf16_dense.hpp>
#include <whisper/onednn_int8_dense.hpp>
#include <whisper/policies.hpp>
#include <whisper/audio.hpp>

#include <filesystem>
#include <map>
#include <numbers>

#include "dense_decoder.hpp"
#include "dense_engine_checks.hpp"
#include "sanitizer_subset.hpp"
#include "synthetic_files.hpp"
#include "test_util.hpp"

using namespace polyattn::whisper;
using whisper_test::tiny_ct2;
using whisper_test::tiny_ggml;
using whisper_test::tiny_pytorch_model;

TEST_SUITE("model") {
  TEST_CASE("layers: sinusoids") {
    const RowMatrixXf pos = sinusoids(1500, 384);
    CHECK(pos(0, 0) == 0.0f);
    CHECK(pos(0, 192) == 1.0f);
    CHECK(pos(1499, 0) == doctest::Approx(std::sin(1499.0)).epsilon(1e-4));
  }

  TEST_CASE("the Eigen engine: linear, conv1d_k3 and encoder attention against double oracles") {
    EigenDense engine;
    whisper_test::check_dense_engine(engine);
  }

  TEST_CASE("the oneDNN engine: linear, conv1d_k3 and encoder attention against double oracles") {
    OnednnDense engine;
    whisper_test::check_dense_engine(engine);
    CHECK(&default_dense() != &engine);
    CHECK(default_dense().name() == engine.name());  // the engine of every call that names none
  }

  TEST_CASE("the streamed logits: within float's sum bound, each row's sums whatever shares its pass, float16 as float") {
    using whisper_test::RowMatrixXd;
    whisper_test::Rng rng(31);
    const double u = std::ldexp(1.0, -24);
    const int threads_before = Eigen::nbThreads();
    // 67 rows of W (no multiple of a block); widths of an odd and an even count of 16-float
    // vectors (a tail vector for the two chains) and a multiple of 8 only (AVX2's width).
    for (Eigen::Index cols : {48, 64, 384, 24}) {
      INFO("cols " << cols);
      const RowMatrixXf values = whisper_test::random_matrix(rng, 67, cols);
      const WeightMatrix f32(values), f16(WeightMatrix::HalfMatrix(values.cast<Eigen::half>()));
      const RowMatrixXf x = whisper_test::random_matrix(rng, kStreamMaxRows, cols);
      for (const WeightMatrix* w : {&f32, &f16}) {
        INFO((w->is_half() ? "float16" : "float32"));
        const RowMatrixXd wd = w->float_rows(0, w->rows()).cast<double>();
        RowMatrixXf alone(x.rows(), w->rows());  // each row of x on its own, on one thread
        Eigen::setNbThreads(1);
        for (Eigen::Index i = 0; i < x.rows(); ++i) w->project_streamed(x.row(i), alone.row(i));
        Eigen::setNbThreads(2);
        for (Eigen::Index n = 1; n <= kStreamMaxRows; ++n) {
          INFO("rows of x " << n);
          RowMatrixXf out = RowMatrixXf::Constant(n, w->rows() + 3, std::numeric_limits<float>::quiet_NaN());
          w->project_streamed(x.topRows(n), out.middleCols(1, w->rows()));
          CHECK(out.col(0).array().isNaN().all());
          CHECK(out.rightCols(2).array().isNaN().all());
          const RowMatrixXf got = out.middleCols(1, w->rows());
          // Float products summed in float, in any order: |got - x W^T| <= k u |x| |W|^T.
          const RowMatrixXd want = x.topRows(n).cast<double>() * wd.transpose();
          const RowMatrixXd scale = x.topRows(n).cast<double>().cwiseAbs() * wd.cwiseAbs().transpose();
          CHECK(((got.cast<double>() - want).cwiseAbs().array() <= (double(cols) * u * scale).array()).all());
          if (stream_available(n, cols)) CHECK(got == alone.topRows(n));  // the pass and the threads change no sum
        }
      }
      // A float16 W gives what the same values stored as float give, bit for bit.
      RowMatrixXf from_half(3, 67), from_float(3, 67);
      f16.project_streamed(x.topRows(3), from_half);
      WeightMatrix(f16.float_rows(0, 67)).project_streamed(x.topRows(3), from_float);
      CHECK(from_half == from_float);
    }
    Eigen::setNbThreads(threads_before);
  }

  TEST_CASE("the oneDNN bfloat16 engine: stored linears within bfloat16's rounding, everything else as float32") {
    using whisper_test::RowMatrixXd;
    OnednnBf16Dense engine;
    whisper_test::Rng rng(23);
    if (!OnednnBf16Dense::supported()) {  // oneDNN 2.6 has no bfloat16 matmul before AVX-512 (an AVX2 CPU)
      const WeightMatrix w(RowMatrixXf(whisper_test::random_matrix(rng, 3, 4)));
      RowMatrixXf y(1, 3);
      CHECK_THROWS_WITH_AS(engine.stored_affine(whisper_test::random_matrix(rng, 1, 4), w, nullptr, y),
                           doctest::Contains("no bfloat16 support in oneDNN: use --compute-type float32"), Error);
      MESSAGE("this CPU has no bfloat16 matmul in oneDNN: only the engine's refusal is checked");
      return;
    }
    const double u = std::ldexp(1.0, -24), u_bf16 = std::ldexp(1.0, -8);
    // W of 300 + 37 rows and 40 columns (no multiple of a vector width), float32 and float16, with
    // a zero row; x of 1, 5 and 300 rows with a zero row.
    RowMatrixXf values = whisper_test::random_matrix(rng, 337, 40);
    values.row(3).setZero();
    const RowVectorXf bias = whisper_test::random_matrix(rng, 1, values.rows());
    const WeightMatrix f32(values), f16(WeightMatrix::HalfMatrix(values.cast<Eigen::half>()));
    for (const WeightMatrix* w : {&f32, &f16}) {
      INFO((w->is_half() ? "float16" : "float32"));
      const RowMatrixXd exact_w = w->float_rows(0, w->rows()).cast<double>();
      const RowMatrixXd rounded_w = w->float_rows(0, w->rows()).cast<Eigen::bfloat16>().cast<double>();
      CHECK(engine.rounded(*w).cast<double>() == rounded_w);
      for (Eigen::Index rows : {1, 5, 300}) {
        INFO("rows " << rows);
        RowMatrixXf x = whisper_test::random_matrix(rng, rows, 40);
        x.row(rows / 2).setZero();
        RowMatrixXf out = RowMatrixXf::Constant(rows, values.rows() + 5, std::numeric_limits<float>::quiet_NaN());
        engine.stored_affine(x, *w, &bias, out.middleCols(2, values.rows()));
        CHECK(out.leftCols(2).array().isNaN().all());
        CHECK(out.rightCols(3).array().isNaN().all());
        const RowMatrixXd got = out.middleCols(2, values.rows()).cast<double>();
        const double k = double(x.cols());
        // The operands each rounded to nearest bfloat16, their products exact in float (8 x 8
        // significand bits), summed in float in any order, then the bias added:
        // |got - (x~ W~^T + b)| <= (k + 2) u (|x~| |W~|^T + |b|).
        const RowMatrixXd rounded_x = x.cast<Eigen::bfloat16>().cast<double>();
        RowMatrixXd want = rounded_x * rounded_w.transpose(), scale = rounded_x.cwiseAbs() * rounded_w.cwiseAbs().transpose();
        want.rowwise() += bias.cast<double>();
        scale.rowwise() += bias.cast<double>().cwiseAbs();
        CHECK(((got - want).cwiseAbs().array() <= ((k + 2) * u * scale).array()).all());
        // Against float32's operands: each product off by at most (2 u_bf16 + u_bf16^2) |x w|,
        // then float's sum: |got - (x W^T + b)| <= (2 u_bf16 + u_bf16^2 + (k + 2) u (1 + 2 u_bf16)^2) (|x| |W|^T + |b|).
        RowMatrixXd want32 = x.cast<double>() * exact_w.transpose(), scale32 = x.cast<double>().cwiseAbs() * exact_w.cwiseAbs().transpose();
        want32.rowwise() += bias.cast<double>();
        scale32.rowwise() += bias.cast<double>().cwiseAbs();
        const double factor = 2 * u_bf16 + u_bf16 * u_bf16 + (k + 2) * u * (1 + 2 * u_bf16) * (1 + 2 * u_bf16);
        CHECK(((got - want32).cwiseAbs().array() <= (factor * scale32).array()).all());
        CHECK(got.row(rows / 2) == bias.cast<double>());  // a zero row of x gives the bias exactly
        CHECK(got.col(3) == RowMatrixXd::Constant(rows, 1, bias(3)));  // so does a zero row of W
        // A second call reuses the rounded weights: the same result.
        RowMatrixXf again(rows, values.rows());
        engine.stored_affine(x, *w, &bias, again);
        CHECK(again == out.middleCols(2, values.rows()));
      }
    }
    // A different weight at a known address, of another shape or of the same, is refused, not
    // silently multiplied by the old copy (converted_weights.hpp).
    WeightMatrix moving(RowMatrixXf(whisper_test::random_matrix(rng, 4, 40)));
    engine.rounded(moving);
    moving = WeightMatrix(RowMatrixXf(whisper_test::random_matrix(rng, 5, 40)));
    CHECK_THROWS_WITH_AS(engine.rounded(moving), doctest::Contains("the weight at a known address changed or is another one (now 5x40, was 4x40)"), Error);
    moving = WeightMatrix(RowMatrixXf(whisper_test::random_matrix(rng, 4, 40)));
    CHECK_THROWS_WITH_AS(engine.rounded(moving), doctest::Contains("the weight at a known address changed"), Error);
    // Shapes are checked before the matmul's descriptors are made from them.
    RowMatrixXf y(2, values.rows());
    CHECK_THROWS_WITH_AS(engine.stored_affine(whisper_test::random_matrix(rng, 2, 39), f32, nullptr, y), doctest::Contains("W^T with W (337x40)"), Error);
    CHECK_THROWS_WITH_AS(engine.stored_affine(whisper_test::random_matrix(rng, 2, 40), f32, nullptr, y.leftCols(336)), doctest::Contains("into y (2x336)"), Error);
    // Float weights (the conv stem) and the logits stay float32: OnednnDense's results, bit for bit.
    OnednnDense float32;
    const RowMatrixXf x = whisper_test::random_matrix(rng, 7, 40);
    RowMatrixXf a(7, values.rows()), b(7, values.rows());
    engine.affine(x, values, &bias, a);
    float32.affine(x, values, &bias, b);
    CHECK(a == b);
    engine.project_into(x, f16, a);
    float32.project_into(x, f16, b);
    CHECK(a == b);
  }

  // What --compute-type bfloat16 and int8 change on the real model: on jfk.wav nothing (measured;
  // each moves every stored product by up to its bound, so a near tie between two tokens may flip
  // on other audio: greedy, on the four espeak-ng sentences of test_policies.cpp, bfloat16's text
  // differs from float32's by 1 word of 11 on one, int8's on two; examples/whisper/README.md).
  TEST_CASE("tiny.en, jfk.wav: the bfloat16 and int8 engines give float32's tokens") {
    const std::string dir = whisper_test::model_dir(), wav = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(dir + "/model.bin") || !whisper_test::have_file(wav)) return;
    // Under the sanitizers the engines' code runs in their synthetic cases; three windows of beam
    // search would take a minute there (sanitizer_subset.hpp).
    if (whisper_test::kSanitizerSubset) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const std::vector<std::vector<float>> jfk{load_audio_16k_mono(wav)};
    const Transcription float32 = model.transcribe(std::span<const std::vector<float>>(jfk), {.batch = 1, .threads = 2});
    CHECK(float32.report.dense == "onednn (CPU)");
    OnednnBf16Dense bf16;
    OnednnInt8Dense int8;
    for (Dense* engine : {static_cast<Dense*>(&bf16), static_cast<Dense*>(&int8)}) {
      INFO("engine: " << engine->name());
      if (engine == &bf16 && !OnednnBf16Dense::supported()) {  // its refusal: the case above
        MESSAGE("this CPU has no bfloat16 matmul in oneDNN: the bfloat16 engine's tokens are not checked");
        continue;
      }
      const Transcription t = model.transcribe(std::span<const std::vector<float>>(jfk), {.batch = 1, .threads = 2, .dense = engine});
      CHECK(t.report.dense == engine->name());
      CHECK(t.files[0].tokens == float32.files[0].tokens);
    }
    // The encoder's 16 stored linears (4 layers of QKV, output, fc1, fc2) and the decoder's 16
    // (4 layers of self-attention input and output projections, fc1, fc2); not the conv stem,
    // the logits or the cross-attention's projections.
    CHECK(int8.quantized_weights() == 32);
  }

  TEST_CASE("tiny.en: weights, encoder positions, jfk.wav transcript") {
    const std::string dir = whisper_test::model_dir();
    const std::string wav = whisper_test::data_file("jfk.wav");
    if (!whisper_test::have_file(dir + "/model.bin") || !whisper_test::have_file(wav)) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const WhisperDims& d = model.dims();
    CHECK(d.n_mels == 80);
    CHECK(d.n_audio_ctx == 1500);
    CHECK(d.n_audio_state == 384);
    CHECK(d.n_audio_head == 6);
    CHECK(d.n_audio_layer == 4);
    CHECK(d.n_text_ctx == 448);
    CHECK(d.n_text_layer == 4);
    CHECK(d.n_vocab == 51864);
    CHECK(model.rules().prompt == std::vector<int>{50257, 50362});
    CHECK(model.rules().suppress_at_begin == std::vector<int>{220, 50256});
    CHECK(model.rules().suppress.size() == 90);

    // The computed sinusoids equal the model's stored (fp16) encoder positions.
    const Ct2ModelBin bin = Ct2ModelBin::parse(read_file_bytes(dir + "/model.bin"));
    const RowMatrixXf stored = detail::to_matrix(bin.tensor("encoder/position_encodings/encodings", {1500, 384}).elements, 1500, 384);
    CHECK((stored - model.weights().encoder_positions).cwiseAbs().maxCoeff() < 1e-3f);
    // The package ships float16 weights; the token embedding (the tied logits) stays float16,
    // holding exactly the file's values.
    const Ct2Variable& embedding = bin.tensor("decoder/embeddings/weight", {51864, 384});
    CHECK(embedding.dtype == Ct2DType::float16);
    CHECK(model.weights().token_embedding.is_half());
    CHECK(model.weights().token_embedding.bytes() == std::size_t(51864) * 384 * 2);
    // So do the encoder's layers and the decoder's MLP (weights.hpp: StoredLinear).
    CHECK(model.weights().encoder[0].qkv.weight.is_half());
    CHECK(model.weights().encoder[3].fc2.weight.is_half());
    CHECK(model.weights().decoder[3].fc1.weight.is_half());
    CHECK(model.weights().token_embedding.as_float() == detail::to_matrix(embedding.elements, 51864, 384));

    const std::vector<std::vector<float>> jfk{load_audio_16k_mono(wav)};
    const Transcription result = model.transcribe(std::span<const std::vector<float>>(jfk), {.batch = 1, .threads = 1});
    const Transcript& t = result.files.front();
    MESSAGE("jfk.wav: \"" << t.text << "\" (" << result.report.policies << ": mel " << result.report.mel_ms << " ms, encode "
                          << result.report.encode_ms << " ms, decode " << result.report.decode_ms << " ms)");
    // Tokens that CTranslate2 4.8.5 (the peer, same weights) produces from this code's
    // log-mel window with prompt <|startoftranscript|><|notimestamps|>, greedy.
    const std::vector<int> peer = {843, 523, 616, 5891, 3399, 1265, 407, 644, 534, 1499, 460, 466,
                                   329, 345, 11, 1265, 644, 345, 460, 466, 329, 534, 1499, 13};
    CHECK(t.tokens == peer);
    // Every exact policy combination gives the same tokens (a subset under the sanitizers:
    // sanitizer_subset.hpp); Whisper-MLA below full rank is an approximation (whisper.mla
    // reports it) and is only required to run here.
    []<class... Ps>(polyattn::TypeList<Ps...>, const WhisperModel& m, std::span<const float> x, const std::vector<int>& want) {
      (..., [&] {
        INFO("policies: " << Ps::name());
        const Transcript got = m.transcribe<Ps>(x, {.batch = 1, .threads = 2});
        if constexpr (is_exact_policy<Ps>) CHECK(got.tokens == want);
        else if constexpr (Ps::self_policy::kind::variant::rank >= 384) CHECK(got.tokens == want);  // full rank: exact
        else MESSAGE(Ps::name() << ": \"" << got.text << "\"");
      }());
    }(whisper_test::RealModelCombinations{}, model, jfk.front(), peer);
    // CTranslate2's generate(beam_size=5) gives the same tokens on jfk.wav (bench/whisper/whisper_vs_ctranslate2.sh
    // --beam-size 5); beams that differ from greedy decoding are checked on espeak-ng speech
    // (test_policies.cpp). Paged<16>: the beams share their prompt's pages. Under the sanitizers the
    // long-form case below decodes jfk.wav with the same policy and beam size instead.
    if (!whisper_test::kSanitizerSubset) {
      const Transcript beam = model.transcribe<combination::MhaPaged>(jfk.front(), {.batch = 1, .threads = 2, .beam_size = 5});
      CHECK(beam.tokens == peer);
    }
    CHECK(t.windows == 1);
    std::string text = t.text;
    REQUIRE(!text.empty());
    CHECK(text.front() == ' ');
    text.erase(0, 1);
    CHECK(text == "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country.");
    // The reference sentence of DESIGN.md has a comma after "Americans"; tiny.en greedy
    // (here and in CTranslate2) does not produce it. Reported, not failed.
    WARN_MESSAGE(text == "And so my fellow Americans, ask not what your country can do for you, ask what you can do for your country.",
                 "tiny.en greedy output differs from the DESIGN.md reference sentence (comma after 'Americans')");
  }

  TEST_CASE("empty audio: one window") {
    const std::string dir = whisper_test::model_dir();
    if (!whisper_test::have_file(dir + "/model.bin")) return;
    // A real window takes about 20 s under the sanitizers; there the synthetic model's several
    // files (longform suite) decode a file without audio instead (sanitizer_subset.hpp).
    if (whisper_test::kSanitizerSubset) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const Transcript silence = model.transcribe(std::vector<float>{});
    CHECK(silence.windows == 1);
    MESSAGE("empty audio: \"" << silence.text << "\"");
  }
}

TEST_SUITE("model") {
  TEST_CASE("synthetic model: forked sequences (beams) read their parent's cross cache and go on as their own tokens say") {
    whisper_test::Rng rng(13);
    const int n_vocab = 51864, d = 8;
    const WhisperWeights c = weights_from_ct2(Ct2ModelBin::parse(tiny_ct2(tiny_pytorch_model(rng, n_vocab, d))));
    RowMatrixXf mel(80, 3000);
    for (Eigen::Index i = 0; i < mel.size(); ++i) mel.data()[i] = rng.normal_ish();
    const RowMatrixXf features = encode(c, mel);
    const std::vector<int> prompt = {50257, 50362, 11};
    auto close_to = [](const RowVectorXf& got, const RowVectorXf& want) {
      return (got - want).cwiseAbs().maxCoeff() <= 1e-4f * (1.0f + want.cwiseAbs().maxCoeff());
    };
    [&]<class... Ps>(polyattn::TypeList<Ps...>) {
      (..., [&] {
        if constexpr (!is_exact_policy<Ps>) return;
        INFO("policies: " << Ps::name());
        Decoder<Ps> dec(c, {.max_sequences = 3, .max_audio = 1, .threads = 2});
        const int parent = dec.open(features);
        const int one[] = {parent};
        dec.prefill(one, prompt);
        const std::size_t cross_held = dec.cache_use().cross.bytes_held, self_held = dec.cache_use().self.bytes_held;
        const int child = dec.fork(parent), twin = dec.fork(child);
        CHECK(dec.length(child) == 3);
        const DecoderCacheUse forked = dec.cache_use();
        CHECK(forked.cross.bytes_held == cross_held);  // one audio, one cross cache
        CHECK(forked.cross.bytes_if_copied == 3 * cross_held);
        CHECK(forked.self.bytes_if_copied == 3 * self_held);
        CHECK(forked.self.bytes_held <= forked.self.bytes_if_copied);
        // The three diverge: each decodes its own token, in one batch; each equals the oracle of its history.
        const int seqs[] = {parent, child, twin}, tokens[] = {400, 7, 9000};
        RowMatrixXf logits = dec.decode(seqs, tokens);
        for (int i = 0; i < 3; ++i) {
          std::vector<int> history = prompt;
          history.push_back(tokens[i]);
          CHECK(close_to(logits.row(i), whisper_test::dense_decoder_logits(c, features, history)));
        }
        // The parent leaves; its beams still read the window's cross cache.
        dec.close(parent);
        CHECK(dec.cache_use().cross.bytes_held == cross_held);
        const int rest[] = {child, twin}, next[] = {5, 5};
        logits = dec.decode(rest, next);
        CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, features, {50257, 50362, 11, 7, 5})));
        CHECK(close_to(logits.row(1), whisper_test::dense_decoder_logits(c, features, {50257, 50362, 11, 9000, 5})));
        // No free sequence slot for a fork, and no free window for another audio: errors that change nothing.
        const int again = dec.fork(child);
        CHECK_THROWS_WITH_AS(dec.fork(twin), doctest::Contains("all 3 sequence slots are open"), polyattn::CapacityError);
        dec.close(again);
        CHECK_THROWS_AS(dec.open(features), polyattn::CapacityError);
        CHECK(dec.length(child) == 5);
        dec.close(child);
        dec.close(twin);
        CHECK(dec.cache_use().cross.bytes_held == 0);  // freed with its last sequence
        const int reopened = dec.open(features);
        CHECK(dec.length(reopened) == 0);
      }());
    }(DecoderCombinations{});

    // Paged<16>: beams share their parent's full pages, so they hold less than copies would.
    Decoder<combination::MhaPaged> dec(c, {.max_sequences = 2, .max_audio = 1, .threads = 2});
    const int parent = dec.open(features), one[] = {parent};
    dec.prefill(one, std::vector<int>(20, 11));  // one full page and 4 rows of the next
    const std::size_t parent_held = dec.cache_use().self.bytes_held;
    dec.fork(parent);
    const DecoderCacheUse u = dec.cache_use();
    CHECK(u.self.bytes_if_copied == 2 * parent_held);
    CHECK(u.self.bytes_held == parent_held / 2 * 3);  // 2 pages of the parent, 1 of its own (the partly filled last page)
  }

  TEST_CASE("synthetic model: weights stored float16 give the encoding and logits of the same values stored float32, bit for bit") {
    whisper_test::Rng rng(11);
    const int n_vocab = 51864, d = 8;
    auto tensors = tiny_pytorch_model(rng, n_vocab, d);
    std::vector<std::string> every_name;
    for (auto& t : tensors) {
      for (float& f : t.data) f = static_cast<float>(Eigen::half(f));  // values float16 can hold, in both files
      every_name.push_back(t.name);
    }
    const WhisperWeights f32 = weights_from_ggml(parse_ggml(tiny_ggml(tensors, n_vocab, d)));
    const WhisperWeights f16 = weights_from_ggml(parse_ggml(tiny_ggml(tensors, n_vocab, d, every_name)));
    // Every linear layer stays float16, the decoder's attention included (its policies read it in
    // float only while they convert it), holding the values the float32 file holds.
    const DecoderBlock &b16 = f16.decoder[0], &b32 = f32.decoder[0];
    for (const WeightMatrix* w : {&f16.encoder[0].qkv.weight, &f16.encoder[0].attn_out.weight, &f16.encoder[0].fc1.weight,
                                  &f16.encoder[0].fc2.weight, &b16.self_qkv.weight, &b16.self_out.weight, &b16.cross_q.weight,
                                  &b16.cross_kv.weight, &b16.cross_out.weight, &b16.fc1.weight, &b16.fc2.weight, &f16.token_embedding})
      CHECK(w->is_half());
    CHECK(!f32.encoder[0].fc1.weight.is_half());
    CHECK(!b32.self_qkv.weight.is_half());
    CHECK(b16.self_qkv.weight.float_rows(0, b16.self_qkv.out_features()) == b32.self_qkv.weight.float_rows(0, b32.self_qkv.out_features()));
    CHECK(b16.cross_kv.weight.float_rows(0, b16.cross_kv.out_features()) == b32.cross_kv.weight.float_rows(0, b32.cross_kv.out_features()));

    RowMatrixXf mel(80, 3000);
    for (Eigen::Index i = 0; i < mel.size(); ++i) mel.data()[i] = rng.normal_ish();
    const RowMatrixXf e32 = encode(f32, mel), e16 = encode(f16, mel);
    CHECK(e16 == e32);
    const std::vector<int> prompt = {50257, 50362, 11}, next = {400};
    // Every exact policy pair (MLA's ranks exceed this model's width): their conversions read the
    // same float values, and a float16 projection converts its panel exactly before the same product.
    [&]<class... Ps>(polyattn::TypeList<Ps...>) {
      (..., [&] {
        if constexpr (!is_exact_policy<Ps>) return;
        INFO("policies: " << Ps::name());
        Decoder<Ps> dec32(f32, {.max_sequences = 1, .threads = 1}), dec16(f16, {.max_sequences = 1, .threads = 1});
        const int s32[] = {dec32.open(e32)}, s16[] = {dec16.open(e16)};
        CHECK(dec16.prefill(s16, prompt) == dec32.prefill(s32, prompt));
        CHECK(dec16.decode(s16, next) == dec32.decode(s32, next));
      }());
    }(DecoderCombinations{});
  }

  TEST_CASE("synthetic model: ggml and CTranslate2 forms load the same weights and logits") {
    whisper_test::Rng rng(9);
    const int n_vocab = 51864, d = 8;
    const auto tensors = tiny_pytorch_model(rng, n_vocab, d);
    const WhisperWeights g = weights_from_ggml(parse_ggml(tiny_ggml(tensors, n_vocab, d)));
    const WhisperWeights c = weights_from_ct2(Ct2ModelBin::parse(tiny_ct2(tensors)));
    CHECK(c.dims.n_audio_state == d);
    CHECK(c.dims.n_audio_head == 2);
    CHECK(c.dims.n_audio_layer == 1);
    CHECK(c.dims.n_text_layer == 1);
    CHECK(c.dims.n_vocab == n_vocab);
    CHECK(g.conv1_w == c.conv1_w);
    CHECK(g.conv2_b == c.conv2_b);
    CHECK(g.encoder[0].qkv.weight == c.encoder[0].qkv.weight);
    CHECK(g.encoder[0].qkv.bias == c.encoder[0].qkv.bias);
    CHECK(g.decoder[0].cross_kv.weight == c.decoder[0].cross_kv.weight);
    CHECK(g.decoder[0].cross_kv.bias == c.decoder[0].cross_kv.bias);
    CHECK(g.decoder[0].fc2.weight == c.decoder[0].fc2.weight);
    CHECK(g.decoder_ln.beta == c.decoder_ln.beta);
    CHECK(g.token_embedding == c.token_embedding);
    CHECK(!g.token_embedding.is_half());  // stored float32 in both files
    // Stored float16, the token embedding stays float16, holding the file's (rounded) values.
    const WhisperWeights h = weights_from_ggml(parse_ggml(tiny_ggml(tensors, n_vocab, d, {"decoder.token_embedding.weight"})));
    CHECK(h.token_embedding.is_half());
    CHECK(h.token_embedding.as_float() == g.token_embedding.as_float().cast<Eigen::half>().cast<float>());

    RowMatrixXf mel(80, 3000);
    for (Eigen::Index i = 0; i < mel.size(); ++i) mel.data()[i] = rng.normal_ish();
    const RowMatrixXf fg = encode(g, mel), fc = encode(c, mel);
    CHECK(fg == fc);
    CHECK(fg.rows() == 1500);
    CHECK(fg.allFinite());

    // The policy decoder (prefill, incremental decode, batches of sequences with different
    // lengths that join and leave) equals the dense oracle that recomputes every prefix.
    RowMatrixXf mel2(80, 3000);
    for (Eigen::Index i = 0; i < mel2.size(); ++i) mel2.data()[i] = rng.normal_ish();
    const RowMatrixXf fc2 = encode(c, mel2);
    const std::vector<int> a_tokens = {50257, 50362, 11, 220, 400, 7, 9000}, b_tokens = {50257, 50362, 5, 51000, 3};
    auto close_to = [](const RowVectorXf& got, const RowVectorXf& want) {
      return (got - want).cwiseAbs().maxCoeff() <= 1e-4f * (1.0f + want.cwiseAbs().maxCoeff());
    };
    auto prefix = [](const std::vector<int>& t, std::size_t n) { return std::vector<int>(t.begin(), t.begin() + std::ptrdiff_t(n)); };
    // Whisper-MLA needs latent ranks of the real model (96 > d = 8): exact policies only here.
    [&]<class... Ps>(polyattn::TypeList<Ps...>) {
      (..., [&] {
        if constexpr (!is_exact_policy<Ps>) return;
        INFO("policies: " << Ps::name());
        Decoder<Ps> dec(c, {.max_sequences = 3, .threads = 2});
        const int a = dec.open(fc);
        const int a_seq[] = {a};
        RowMatrixXf logits = dec.prefill(a_seq, prefix(a_tokens, 2));
        CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, fc, prefix(a_tokens, 2))));
        for (std::size_t i = 2; i < 4; ++i) {  // a alone
          const int tok[] = {a_tokens[i]};
          logits = dec.decode(a_seq, tok);
          CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, fc, prefix(a_tokens, i + 1))));
        }
        const int b = dec.open(fc2);  // b joins: prefill alone, then decodes with a at another length
        const int b_seq[] = {b};
        logits = dec.prefill(b_seq, prefix(b_tokens, 2));
        CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, fc2, prefix(b_tokens, 2))));
        for (std::size_t i = 4; i < 7; ++i) {
          const int seqs[] = {b, a}, tok[] = {b_tokens[i - 2], a_tokens[i]};
          logits = dec.decode(seqs, tok);
          CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, fc2, prefix(b_tokens, i - 1))));
          CHECK(close_to(logits.row(1), whisper_test::dense_decoder_logits(c, fc, prefix(a_tokens, i + 1))));
        }
        CHECK(dec.length(a) == 7);
        CHECK(dec.length(b) == 5);
        const DecoderCacheUse use = dec.cache_use();
        CHECK(use.self.tokens == 12);
        // One layer of d = 8: MHA caches K and V, slim K, X-cache x; the cross baseline K and V,
        // the other options one row of d per frame.
        const std::size_t self_rows = std::is_same_v<typename Ps::self_policy::kind, self_kind::Mha> ? 2 : 1;
        const std::size_t cross_rows = std::is_same_v<typename Ps::cross_policy, Cross<polyattn::cross::Baseline>> ? 2 : 1;
        CHECK(use.self.bytes_per_token == self_rows * 8 * sizeof(float));
        // Contiguous layouts hold the 12 rows, Paged<16> one page per sequence; nothing is shared.
        CHECK((use.self.bytes_held == 12 * use.self.bytes_per_token || use.self.bytes_held == 2 * 16 * use.self.bytes_per_token));
        CHECK(use.self.bytes_if_copied == use.self.bytes_held);
        CHECK(use.cross.tokens == 2 * 1500);
        CHECK(use.cross.bytes_per_token == cross_rows * 8 * sizeof(float));
        CHECK(use.cross.bytes_held == 2 * 1500 * use.cross.bytes_per_token);

        // A prefill of several sequences at once equals each alone.
        dec.close(a);
        const int a2 = dec.open(fc), c2 = dec.open(fc2);
        const int both[] = {a2, c2};
        logits = dec.prefill(both, prefix(a_tokens, 3));
        CHECK(close_to(logits.row(0), whisper_test::dense_decoder_logits(c, fc, prefix(a_tokens, 3))));
        CHECK(close_to(logits.row(1), whisper_test::dense_decoder_logits(c, fc2, prefix(a_tokens, 3))));

        // Bad inputs are errors naming the problem, and change nothing.
        const int bad_token[] = {n_vocab};
        CHECK_THROWS_WITH_AS(dec.decode(b_seq, bad_token), doctest::Contains("token id 51864"), Error);
        const int dup[] = {b, b}, two_tokens[] = {1, 2};
        CHECK_THROWS_WITH_AS(dec.decode(dup, two_tokens), doctest::Contains("appears twice"), Error);
        CHECK_THROWS_WITH_AS(dec.open(fc), doctest::Contains("sequence slots"), polyattn::CapacityError);
        dec.close(c2);
        const int closed[] = {c2}, one_token[] = {1};
        CHECK_THROWS_WITH_AS(dec.decode(closed, one_token), doctest::Contains("is not open"), Error);
        CHECK(dec.length(b) == 5);
        const std::vector<int> too_many(444, 1);
        CHECK_THROWS_WITH_AS(dec.prefill(b_seq, too_many), doctest::Contains("exceed the text context of 448"), Error);
        const std::vector<int> fill(443, 1);
        dec.prefill(b_seq, fill);  // exactly 448
        CHECK(dec.length(b) == 448);
        CHECK_THROWS_WITH_AS(dec.decode(b_seq, one_token), doctest::Contains("holds 448 tokens"), Error);
        CHECK_THROWS_AS(dec.open(RowMatrixXf::Zero(1500, d + 1)), ModelError);
      }());
    }(DecoderCombinations{});
    CHECK_THROWS_WITH_AS(Decoder<DefaultPolicies>(c, {.max_sequences = 0}), doctest::Contains("max_sequences must be >= 1"), Error);
    CHECK_THROWS_AS(encode(c, RowMatrixXf::Zero(80, 2999)), Error);

    // A missing tensor / wrong shape names the tensor.
    auto missing = tensors;
    missing.erase(missing.begin() + 3);  // encoder.conv2.bias
    CHECK_THROWS_WITH_AS(weights_from_ggml(parse_ggml(tiny_ggml(missing, n_vocab, d))),
                         doctest::Contains("encoder.conv2.bias"), ModelError);
    auto misshapen = tensors;
    misshapen[3].shape = {d / 2, 2};
    CHECK_THROWS_WITH_AS(weights_from_ggml(parse_ggml(tiny_ggml(misshapen, n_vocab, d))),
                         doctest::Contains("encoder.conv2.bias"), ModelError);
  }
}

TEST_SUITE("model") {
  TEST_CASE("a window that reaches the sample length without end-of-text is reported as cut (issue 11, bug 7)") {
    // fixed_output_ggml: the same token wins every step; with eot_sum -16 <|endoftext|> never does,
    // with 24 it ends each window at its second step.
    auto load = [](float eot_sum, const std::string& name) {
      const std::string path = whisper_test::temp_path(name);
      whisper_test::write_file(path, whisper_test::fixed_output_ggml(eot_sum));
      const WhisperModel model = WhisperModel::load_ggml_file(path);
      std::filesystem::remove(path);
      return model;
    };
    const WhisperModel never_ends = load(-16.0f, "never_ends.ggml.bin"), ends = load(24.0f, "ends.ggml.bin");
    REQUIRE(never_ends.rules().max_length == 448);
    // 31 s: two windows, decoded one at a time and together.
    const std::vector<std::vector<float>> audio{std::vector<float>(16000 * 31, 0.0f)};
    for (int batch : {1, 2}) {
      CAPTURE(batch);
      const Transcription cut = never_ends.transcribe(std::span<const std::vector<float>>(audio), {.batch = batch, .threads = 1});
      const Transcript& t = cut.files.front();
      CHECK(t.windows == 2);
      CHECK(t.cut_windows == std::vector<int>{0, 1});
      CHECK(cut.report.windows_cut == 2);
      // Each window samples 224 tokens (half the 448-token context, as openai-whisper and CTranslate2).
      CHECK(t.tokens == std::vector<int>(2 * 224, 1));
      CHECK(t.text == std::string(2 * 224, 'b'));
    }
    const Transcription whole = ends.transcribe(std::span<const std::vector<float>>(audio), {.batch = 2, .threads = 1});
    CHECK(whole.files.front().tokens == std::vector<int>{1, 1});  // one token per window, then end-of-text
    CHECK(whole.files.front().cut_windows.empty());
    CHECK(whole.report.windows_cut == 0);

    // Files are opened as the batch needs their windows, and a spectrogram is freed once its
    // windows are encoded: each file's result is its own, and the spectrograms held at once
    // depend on the batch, not on the number of files.
    const std::vector<std::vector<float>> files{std::vector<float>(16000 * 31, 0.0f), {}, std::vector<float>(16000 * 5, 0.0f)};
    const std::vector<std::vector<int>> alone{{1, 1}, {1}, {1}};  // a file without audio is one silent window
    for (const auto& [batch_size, held] : {std::pair{1, 1}, {2, 1}, {3, 2}, {16, 3}}) {
      const int batch = batch_size;  // CAPTURE takes a reference, which clang 14 refuses for a binding
      CAPTURE(batch);
      const Transcription r = ends.transcribe(std::span<const std::vector<float>>(files), {.batch = batch, .threads = 1});
      REQUIRE(r.files.size() == files.size());
      for (std::size_t f = 0; f < files.size(); ++f) CHECK(r.files[f].tokens == alone[f]);
      CHECK(r.files[0].windows == 2);
      CHECK(r.report.windows == 4);
      CHECK(r.report.max_batch == std::min(batch, 4));
      CHECK(r.report.max_spectrograms == held);
    }

    // The same through an AudioSource that reads into its buffer: each file once, in order; an
    // error reading one is the call's error.
    std::vector<std::size_t> reads;
    const AudioSource source{files.size(), [&](std::size_t f, std::vector<float>& buffer) {
                               reads.push_back(f);
                               if (f == 7) throw FormatError("file 7: unreadable");
                               buffer = files[f % files.size()];
                               return std::span<const float>(buffer);
                             }};
    const Transcription read = ends.transcribe(source, {.batch = 1, .threads = 1});
    CHECK(reads == std::vector<std::size_t>{0, 1, 2});
    for (std::size_t f = 0; f < files.size(); ++f) {
      CHECK(read.files[f].tokens == alone[f]);
      CHECK(read.files[f].seconds == double(files[f].size()) / 16000.0);
    }
    const AudioSource eight{8, source.read};
    CHECK_THROWS_WITH_AS(ends.transcribe(eight, {.batch = 2, .threads = 1}), "file 7: unreadable", FormatError);
  }
}

TEST_SUITE("longform") {
  TEST_CASE("temperature fallback: a window that repeats itself is decoded again at each temperature, with seeded samples") {
    // fixed_output_ggml(-16): one token wins every step, so the text repeats and every attempt fails.
    const std::string path = whisper_test::temp_path("fallback.ggml.bin");
    whisper_test::write_file(path, whisper_test::fixed_output_ggml(-16.0f));
    const WhisperModel model = WhisperModel::load_ggml_file(path);
    std::filesystem::remove(path);
    const std::vector<std::vector<float>> audio{std::vector<float>(16000 * 31, 0.0f)};  // two windows
    TranscribeOptions opt{.batch = 1, .threads = 1, .temperatures = {0.0f, 0.5f, 1.0f}, .best_of = 2, .seed = 3};
    const Transcription once = model.transcribe(std::span<const std::vector<float>>(audio), opt);
    CHECK(once.report.fallbacks == 4);  // two windows, two retries each
    CHECK(once.report.windows == 6);
    REQUIRE(once.files.front().segments.size() == 2);
    for (const Segment& s : once.files.front().segments) CHECK(s.temperature == 1.0f);  // the last attempt is kept
    opt.batch = 2;  // the same draws whatever the batch
    CHECK(model.transcribe(std::span<const std::vector<float>>(audio), opt).files.front().tokens == once.files.front().tokens);
  }

  TEST_CASE("synthetic model with timestamps: the decoding loop applies the timestamp rules and seeks by them, greedy and with beams") {
    const std::string path = whisper_test::temp_path("timestamped.ggml.bin");
    whisper_test::write_file(path, whisper_test::timestamped_ggml());
    const WhisperModel model = WhisperModel::load_ggml_file(path);
    std::filesystem::remove(path);
    const TimestampTokens ts = model.timestamp_tokens();
    REQUIRE(ts.begin == 50363);  // timestamped_ggml's ids
    const auto is_stamp = [&](int t) { return t >= ts.begin && t <= ts.end; };
    const std::vector<std::vector<float>> audio{std::vector<float>(16000 * 8, 0.0f)};
    for (int beam : {1, 5}) {
      INFO("beam size " << beam);
      const Transcription r = model.transcribe(std::span<const std::vector<float>>(audio),
                                               {.batch = 1, .threads = 1, .beam_size = beam, .timestamps = true});
      const Transcript& t = r.files.front();
      // The rules on every segment: a timestamp first (the first window's no later than
      // <|1.00|>), timestamps never decreasing, two in a row followed by text.
      REQUIRE(!t.segments.empty());
      CHECK(t.segments.front().tokens.front() <= ts.max_initial);
      for (const Segment& seg : t.segments) {
        REQUIRE(seg.tokens.size() >= 2);
        CHECK(is_stamp(seg.tokens.front()));
        CHECK(!is_stamp(seg.tokens[1]));
        for (std::size_t k = 1, last = std::size_t(seg.tokens.front()); k < seg.tokens.size(); ++k) {
          if (is_stamp(seg.tokens[k])) {
            CHECK(std::size_t(seg.tokens[k]) >= last);
            last = std::size_t(seg.tokens[k]);
          }
          if (k >= 2 && is_stamp(seg.tokens[k - 1]) && is_stamp(seg.tokens[k - 2])) CHECK(!is_stamp(seg.tokens[k]));
        }
      }
      // What the rules force from this model: each window's one complete segment is
      // <|0.20|> b <|2.00|>, and the next window starts where it ended, 2 s later, until the 8 s
      // of audio are read.
      REQUIRE(t.segments.size() == 4);
      for (std::size_t k = 0; k < t.segments.size(); ++k) {
        CHECK(t.segments[k].tokens == std::vector<int>{ts.begin + 10, 1, ts.begin + 100});
        CHECK(t.segments[k].start == doctest::Approx(2.0 * double(k) + 0.2));
        CHECK(t.segments[k].end == doctest::Approx(2.0 * double(k) + 2.0));
      }
    }

    // Several files: each gets the segments it gets alone (a file without audio none), one window
    // at a time or all at once; at batch 1 one spectrogram is held at a time.
    // 4 s (two windows, as above), none, 3 s.
    const std::vector<std::vector<float>> files{std::vector<float>(16000 * 4, 0.0f), {}, std::vector<float>(16000 * 3, 0.0f)};
    std::vector<Transcript> alone;
    for (const std::vector<float>& f : files)
      alone.push_back(model.transcribe(std::span<const std::vector<float>>(&f, 1), {.batch = 1, .threads = 1, .timestamps = true}).files.front());
    CHECK(alone[0].segments.size() == 2);
    CHECK(alone[1].segments.empty());
    CHECK(!alone[2].segments.empty());
    for (const auto& [batch_size, held] : {std::pair{1, 1}, {3, 2}}) {
      const int batch = batch_size;  // as above
      CAPTURE(batch);
      const Transcription r = model.transcribe(std::span<const std::vector<float>>(files), {.batch = batch, .threads = 1, .timestamps = true});
      REQUIRE(r.files.size() == files.size());
      for (std::size_t f = 0; f < files.size(); ++f) {
        CHECK(r.files[f].tokens == alone[f].tokens);
        REQUIRE(r.files[f].segments.size() == alone[f].segments.size());
        for (std::size_t k = 0; k < alone[f].segments.size(); ++k) CHECK(r.files[f].segments[k].start == alone[f].segments[k].start);
      }
      CHECK(r.report.max_spectrograms == held);
    }
  }

  TEST_CASE("jfk.wav with timestamps at beam size 5: faster-whisper's segments") {
    const std::string wav = whisper_test::data_file("jfk.wav"), dir = whisper_test::model_dir();
    if (!whisper_test::have_file(wav) || !whisper_test::have_file(dir + "/model.bin")) return;
    const WhisperModel model = WhisperModel::load_ct2(dir);
    const std::vector<std::vector<float>> jfk{load_audio_16k_mono(wav)};
    TranscribeOptions opt{.batch = 1, .threads = 2, .beam_size = 5, .timestamps = true,
                          .temperatures = {0.0f, 0.2f, 0.4f, 0.6f, 0.8f, 1.0f}};
    const Transcription r = model.transcribe<combination::MhaPaged>(std::span<const std::vector<float>>(jfk), opt);
    const Transcript& t = r.files.front();
    // faster-whisper 1.2.1 (CTranslate2 4.8.5, float32), transcribe(beam_size=5, vad_filter=False) on
    // the same weights: bench/whisper/whisper_longform.sh prints the same for its clip.
    REQUIRE(t.segments.size() == 2);
    CHECK(t.segments[0].tokens == std::vector<int>{50363, 843, 523, 11, 616, 5891, 3399, 1265, 407, 644, 534, 1499, 460, 466, 329, 345, 50763});
    CHECK(t.segments[1].tokens == std::vector<int>{50763, 1265, 644, 345, 460, 466, 329, 534, 1499, 13, 50913});
    CHECK(t.segments[0].start == 0.0);
    CHECK(t.segments[0].end == doctest::Approx(8.0));
    CHECK(t.segments[1].start == doctest::Approx(8.0));
    CHECK(t.segments[1].end == doctest::Approx(11.0));
    CHECK(t.segments[0].text == " And so, my fellow Americans ask not what your country can do for you");
    CHECK(t.segments[1].text == " ask what you can do for your country.");
    // Its figures for the window, to float rounding: avg_logprob -0.289951, no_speech_prob 0.062824,
    // compression_ratio 1.3417721518987342.
    CHECK(t.segments[0].avg_log_prob == doctest::Approx(-0.289951).epsilon(1e-3));
    CHECK(t.segments[0].no_speech_prob == doctest::Approx(0.062824).epsilon(1e-3));
    CHECK(t.segments[0].compression_ratio == doctest::Approx(106.0 / 79.0).epsilon(1e-6));
    CHECK(r.report.fallbacks == 0);
    CHECK(t.text == " And so, my fellow Americans ask not what your country can do for you ask what you can do for your country.");
  }
}

// dp_engine._core: what the Python package (python/dp_engine) calls in the library the CLI uses —
// the flag table (keywords, kinds, defaults), a command run in this process, arrays handed over as
// a data set, the build's identity, and OpenBLAS's state.
#include <cblas.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <exception>
#include <string>
#include <vector>

#include "data/memory_data.hpp"
#include "memory_arrays.hpp"
#include "run_command.hpp"
#include "tools/dp/command_failure.hpp"
#include "tools/dp/flags/flag_table.hpp"
#include "tools/dp/version_text.hpp"

namespace py = pybind11;

namespace dp::python {
namespace {

constexpr cli::Command kCommands[] = {cli::Command::Train, cli::Command::Memprof, cli::Command::Plan,
                                      cli::Command::Demo, cli::Command::Eval};

cli::Command command_of(const std::string& name) {
  for (cli::Command c : kCommands)
    if (name == cli::command_name(c)) return c;
  throw py::value_error("no dp command '" + name + "' takes flags");
}

// The kind of a flag's value, as the Python side checks a keyword's: switch, int, float, text, floats.
const char* kind_name(cli::FlagKind kind) {
  switch (kind) {
    case cli::FlagKind::Switch: return "switch";
    case cli::FlagKind::WholeNumber: return "int";
    case cli::FlagKind::Number: return "float";
    case cli::FlagKind::Text: return "text";
    case cli::FlagKind::Numbers: break;
  }
  return "floats";
}

// Every row of the flag table: its keyword, its flag, the kind of its value, the commands that take
// it (and those that parse it to refuse it), its list count, whether it is required, and its help.
py::list flag_rows() {
  py::list rows;
  for (const cli::FlagRow& row : cli::flag_table()) {
    py::list commands, hidden;
    for (cli::Command c : kCommands) {
      if (cli::takes(row, c)) commands.append(cli::command_name(c));
      if (row.hidden_in & static_cast<unsigned>(c)) hidden.append(cli::command_name(c));
    }
    const std::string names(row.names);
    py::dict d;
    d["keyword"] = cli::keyword_of(row.names);
    d["flag"] = names.substr(0, names.find(','));
    d["kind"] = kind_name(cli::kind_of(row));
    d["commands"] = commands;
    d["hidden_in"] = hidden;
    d["values"] = row.values;
    d["required"] = row.required;
    d["group"] = std::string(row.group);
    d["help"] = std::string(row.help);
    rows.append(d);
  }
  return rows;
}

}  // namespace
}  // namespace dp::python

PYBIND11_MODULE(_core, m) {
  using namespace dp::python;
  m.doc() = "dp-engine's library, as the dp_engine package calls it (not an API of its own)";
  // A dp error raised by a call here: dp_engine.errors' DpError (OutOfMemoryError for exit 3), with
  // the CLI's message and exit code.
  py::register_exception_translator([](std::exception_ptr error) {
    if (!error) return;
    try {
      std::rethrow_exception(error);
    } catch (const py::builtin_exception&) {
      throw;
    } catch (const py::error_already_set&) {
      throw;
    } catch (const std::exception&) {
      const dp::cli::CommandFailure f = dp::cli::failure_of(error);
      py::object errors = py::module_::import("dp_engine.errors");
      py::object raised = errors.attr(f.exit_code == 3 ? "OutOfMemoryError" : "DpError")(f.message, f.exit_code, f.remedies);
      PyErr_SetObject(raised.get_type().ptr(), raised.ptr());
    }
  });
  m.def("flag_rows", &flag_rows, "every row of dp's flag table");
  m.def(
      "defaults",
      [](const std::string& command) {
        const dp::cli::Command c = command_of(command);
        return dp::cli::settings_json(dp::cli::defaults_for(c), c).dump();
      },
      "a command's defaults by keyword, as JSON");
  m.def(
      "run",
      [](const std::vector<std::string>& argv, bool interruptible, bool step_lines) {
        CommandOutcome o;
        {
          py::gil_scoped_release release;
          o = run_command(argv, interruptible, step_lines);
        }
        return py::make_tuple(o.exit_code, o.message, o.remedies);
      },
      py::arg("argv"), py::arg("interruptible") = false, py::arg("step_lines") = true,
      "runs a dp command line in this process: (exit code, a failure's message, out-of-memory remedies)");
  m.def("put_images", &put_images, py::arg("name"), py::arg("images"), py::arg("labels"), py::arg("test_images"),
        py::arg("test_labels"), py::arg("source"));
  m.def("put_tokens", &put_tokens, py::arg("name"), py::arg("train"), py::arg("val"), py::arg("source"));
  m.def("drop_data", &dp::drop_memory_data, py::arg("name"));
  m.def("version_text", &dp::cli::version_text);
  m.def("commit", &dp::cli::commit);
  m.def("blas_core", [] { return std::string(openblas_get_corename()); }, "the kernels OpenBLAS chose for this CPU");
  m.def("blas_threads", [] { return openblas_get_num_threads(); });
}

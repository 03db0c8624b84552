# ff_probe_torch(<python>): the torch that modules built against it (framefuse._torch_native,
# _torch_replay) will be imported with, asked of <python>. Sets in the caller's scope:
#   FF_TORCH_FOUND      TRUE when <python> imports torch
#   FF_TORCH_VERSION    torch.__version__
#   FF_TORCH_DIR        the torch package's folder
#   FF_TORCH_CXX11_ABI  torch._C._GLIBCXX_USE_CXX11_ABI as 0 or 1
#   FF_TORCH_PROBE      "" when found plainly, "-E" when found only with -E (see below)
#
# NB: `pip install .` (with build isolation) configures with the target environment's interpreter,
# but with PYTHONPATH pointing at a sitecustomize.py of pip's that drops that environment's
# site-packages from sys.path, and PYTHONNOUSERSITE set: the target's torch is installed but not
# importable. torch must not become a build requirement instead (pip would install a second torch,
# maybe another build of it, into the build environment; pyproject.toml says why it is no dependency
# either). So when the plain probe finds no torch, the same interpreter is asked again with -E
# (PYTHON* variables ignored), which sees what that interpreter sees at run time. The plain probe
# goes first so that a torch found through the caller's own PYTHONPATH still counts.
function(ff_probe_torch python)
  set(rc 1)
  foreach(flags IN ITEMS "" "-E")
    if(NOT rc EQUAL 0)
      execute_process(
        COMMAND "${python}" ${flags} -c
          "import os, torch; print(torch.__version__); print(os.path.dirname(torch.__file__)); print(int(torch._C._GLIBCXX_USE_CXX11_ABI))"
        OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
      set(how "${flags}")
    endif()
  endforeach()
  set(FF_TORCH_FOUND FALSE PARENT_SCOPE)
  if(rc EQUAL 0)
    string(REPLACE "\n" ";" out "${out}")
    list(LENGTH out n)
    if(n EQUAL 3)
      list(GET out 0 version)
      list(GET out 1 dir)
      list(GET out 2 abi)
      set(FF_TORCH_FOUND TRUE PARENT_SCOPE)
      set(FF_TORCH_VERSION "${version}" PARENT_SCOPE)
      set(FF_TORCH_DIR "${dir}" PARENT_SCOPE)
      set(FF_TORCH_CXX11_ABI "${abi}" PARENT_SCOPE)
      set(FF_TORCH_PROBE "${how}" PARENT_SCOPE)
    endif()
  endif()
endfunction()

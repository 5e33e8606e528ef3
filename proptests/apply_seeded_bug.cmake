# Applies one seeded bug's patch to a copy of its source (seeded_bugs.cmake), and fails, naming the patch, when it
# no longer applies exactly: no fuzz, no reversed or already-applied hunks.
#   cmake -DPATCH=<patch> -DORIGINAL=<source> -DPATCH_FILE=<NN-name.patch> -DOUTPUT=<copy> -P apply_seeded_bug.cmake
get_filename_component(out_dir ${OUTPUT} DIRECTORY)
file(MAKE_DIRECTORY ${out_dir})
file(REMOVE ${OUTPUT} ${OUTPUT}.rej)
execute_process(COMMAND ${PATCH} --batch --forward --fuzz=0 --output=${OUTPUT} ${ORIGINAL} ${PATCH_FILE}
                RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  file(REMOVE ${OUTPUT})  # no half-patched copy that a later build would take as up to date
  message(FATAL_ERROR "seeded bug patch ${PATCH_FILE} no longer applies to ${ORIGINAL}:\n${out}"
                      "Refresh the patch (proptests/README.md, 'To refresh a patch'); rejected hunks, if any, are in "
                      "${OUTPUT}.rej")
endif()

# The fake CUPTI and the host program that stand in for a CUDA application
# in the tests of libflamewatch-cuda.so (no GPU in CI).
FAKES := $(BUILD)/fakes

# fake_cupti_pm.c adds the profiler, host and PM sampling APIs that
# `flamewatch gpu-busy` calls (with src/gpu/cshim for the <string> that
# cupti_profiler_host.h includes).
$(FAKES)/libcupti.so: tests/fakes/fake_cupti.c tests/fakes/fake_cupti_pm.c tests/fakes/fake_cupti.h | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers \
		-std=gnu11 -fPIC -shared -isystem $(CUDA_INC) -Isrc/gpu/cshim -o $@ \
		tests/fakes/fake_cupti.c tests/fakes/fake_cupti_pm.c -lpthread

# A fake libcuda.so.1: the device list and UUIDs that gpu-busy asks the driver for.
$(FAKES)/libcuda.so.1: tests/fakes/fake_cuda_driver.c | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -Wall -Wextra -Werror -Wno-unused-parameter -std=gnu11 -fPIC -shared \
		-fvisibility=hidden -isystem $(CUDA_INC) -Wl,-soname,libcuda.so.1 -o $@ $<

$(FAKES)/cuda_host: tests/fakes/cuda_host.c tests/fakes/fake_cupti.h | $(DEPS_STAMP)
	$(call msg,CC,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(CC) -O1 -g -Wall -Wextra -Werror -std=gnu11 -o $@ $< -ldl

fakes: $(FAKES)/libcupti.so $(FAKES)/libcuda.so.1 $(FAKES)/cuda_host $(CUDA_LIB)

// Bad registries and kernel maps are errors naming the file and the JSON path; a bad mode is refused.
// RUN: not v8-opt --resolve-contracts='registry="%S/../../Inputs/bad/split_k_without_merge_order.json"' %s 2>&1 | filecheck %s --check-prefix=SPLITK
// RUN: not v8-opt --resolve-contracts='registry="%S/../../Inputs/bad/truncated.json"' %s 2>&1 | filecheck %s --check-prefix=JSON
// RUN: not v8-opt --resolve-contracts='registry="%S/../../Inputs/bad/missing.json"' %s 2>&1 | filecheck %s --check-prefix=MISSING
// RUN: not v8-opt --resolve-contracts='kernel-maps="%S/../../Inputs/bad/maps_undeclared"' %s 2>&1 | filecheck %s --check-prefix=HEADER
// RUN: not v8-opt --resolve-contracts='mode="fast"' %s 2>&1 | filecheck %s --check-prefix=MODE

func.func @decode(%x: tensor<1x64xf32>, %y: tensor<1x64xf32>) -> tensor<1x64xf32> {
  func.return %x : tensor<1x64xf32>
}
// SPLITK: split_k_without_merge_order.json:$.contracts[0].merge_order: error: bad contract registry: a split-K contract must declare its merge order (e.g. 'ascending')
// JSON: truncated.json:$: error: bad contract registry: invalid JSON at line 6 column 1: Expecting property name enclosed in double quotes
// MISSING: missing.json:$: error: bad contract registry: cannot read file: No such file or directory
// HEADER: maps_undeclared/rmsnorm.kmap.json:$.functions.production: error: bad kernel map: function 'fixture_rmsnorm_undeclared' is not declared in ../../kernel_maps/include/fixture.h
// MODE: error: resolve-contracts mode must be one of bringup, production, not 'fast'

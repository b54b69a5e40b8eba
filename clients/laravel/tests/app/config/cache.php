<?php

// A file store: its locks (ShouldBeUnique, WithoutOverlapping) hold across
// the processes of one host, which is all the tests need.
return [
    'default' => 'file',
    'stores' => [
        'file' => ['driver' => 'file', 'path' => storage_path('framework/cache/data')],
        'array' => ['driver' => 'array'],
    ],
    'prefix' => 'onceq_test',
];

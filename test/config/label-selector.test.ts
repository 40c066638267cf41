/** Kubernetes label selectors: the grammar of labels.Parse, its matching semantics, and the objectSelector form. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import fc from 'fast-check';
import {
  canonicalLabelSelector,
  formatLabelSelector,
  fromObjectSelector,
  LabelSelectorError,
  matchesLabels,
  parseLabelSelector,
  toObjectSelector,
  type Requirement,
} from '../../src/config/label-selector.js';
import { selects } from '../support/manifests.js';

function requirements(text: string): Array<[string, string, readonly string[]]> {
  return parseLabelSelector(text).requirements.map((r: Requirement) => [r.key, r.operator, r.values]);
}

function problem(text: string): string {
  try {
    parseLabelSelector(text);
  } catch (error) {
    assert.ok(error instanceof LabelSelectorError, String(error));
    return error.message;
  }
  assert.fail(`${JSON.stringify(text)} parsed`);
}

describe('label selector grammar', () => {
  const valid: Array<[string, Array<[string, string, readonly string[]]>]> = [
    ['app=envoy', [['app', '=', ['envoy']]]],
    ['app==envoy', [['app', '==', ['envoy']]]],
    ['app!=envoy', [['app', '!=', ['envoy']]]],
    ['app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy', [
      ['app.kubernetes.io/name', '=', ['envoy']],
      ['app.kubernetes.io/component', '=', ['proxy']],
    ]],
    ['tier in (edge,gateway)', [['tier', 'in', ['edge', 'gateway']]]],
    ['tier notin (legacy)', [['tier', 'notin', ['legacy']]]],
    ['canary', [['canary', 'exists', []]]],
    ['!legacy', [['legacy', '!exists', []]]],
    // Whitespace is free between tokens, as in kubectl -l.
    ['  app = envoy ,  tier  in(edge , gateway) , ! legacy ', [
      ['app', '=', ['envoy']],
      ['tier', 'in', ['edge', 'gateway']],
      ['legacy', '!exists', []],
    ]],
    // An empty value is a value: the label is present and empty.
    ['app=', [['app', '=', ['']]]],
    ['app==', [['app', '==', ['']]]],
    ['app=,tier', [['app', '=', ['']], ['tier', 'exists', []]]],
    ['tier in (edge,)', [['tier', 'in', ['edge', '']]]],
    // Duplicates collapse in a set; the same key twice is two requirements, both of which must hold.
    ['tier in (a,a,b)', [['tier', 'in', ['a', 'b']]]],
    ['app=envoy,app!=istio', [['app', '=', ['envoy']], ['app', '!=', ['istio']]]],
    // "in" and "notin" are keywords only where an operator belongs.
    ['mode=in', [['mode', '=', ['in']]]],
    ['mode in (in,notin)', [['mode', 'in', ['in', 'notin']]]],
    ['example.com/a_b-c.d=Z.9_z-0', [['example.com/a_b-c.d', '=', ['Z.9_z-0']]]],
  ];
  for (const [text, expected] of valid) test(`${JSON.stringify(text)} parses`, () => assert.deepEqual(requirements(text), expected));

  const invalid: Array<[string, RegExp]> = [
    ['', /^it is empty, which would select every pod/],
    ['   ', /^it is empty/],
    ['app=envoy,', /^it ends where a label key or "!" after "," belongs$/],
    [',app=envoy', /^it has "," at character 1 where a label key or "!" belongs$/],
    ['app envoy', /^it has "envoy" at character 5 where one of =, ==, !=, in, notin, "," or the end after "app" belongs$/],
    ['app=envoy proxy', /^it has "proxy" at character 11 where "," or the end belongs$/],
    ['tier in edge', /^"in" must be followed by values in parentheses, such as tier in \(a,b\); it has "edge" at character 9 instead$/],
    ['tier notin', /^"notin" must be followed by values in parentheses, such as tier notin \(a,b\); it ends there$/],
    ['tier in ()', /^the values of "tier in" are empty; give at least one$/],
    ['tier in (a b)', /^it has "b" at character 12 where "," or "\)" in the values of "tier in" belongs$/],
    ['tier in (a', /^it ends where "," or "\)" in the values of "tier in" belongs$/],
    ['tier notin (a,=)', /^it has "=" at character 15 where a value, "," or "\)" in the values of "tier notin" belongs$/],
    ['app===', /^it has "=" at character 6 where a value for "app" belongs$/],
    ['!', /^it ends where a label key after "!" belongs$/],
    ['!app=envoy', /^it has "=" at character 5 where "," or the end belongs$/],
    ['replicas>2', /the operator ">" at character 9 cannot be written in a webhook's objectSelector/],
    ['replicas<2', /the operator "<" at character 9 cannot be written/],
    ['a/b/c=d', /label key "a\/b\/c" has more than one "\/"/],
    ['/name=x', /label key "\/name" has an empty prefix/],
    ['Example.com/name=x', /prefix of label key "Example.com\/name" is not a DNS subdomain/],
    [`${'a'.repeat(250)}.com/name=x`, /prefix of label key .* is longer than 253 characters/],
    ['example.com/=x', /label key "example.com\/" has an empty name/],
    [`${'n'.repeat(64)}=x`, /the name of label key .* is longer than 63 characters/],
    ['-app=x', /the name of label key "-app" must be letters, digits/],
    ['app_=x', /must be letters, digits, "-", "_" or "\.", starting and ending with a letter or digit/],
    [`app=${'v'.repeat(64)}`, /label value .* is longer than 63 characters/],
    ['app=-envoy', /label value "-envoy" must be letters, digits/],
    ['app=en/voy', /label value "en\/voy" must be letters/],
    ['tier in (edge,-x)', /label value "-x"/],
    ['in=x', /^it has "in" at character 1 where a label key or "!" belongs$/],
  ];
  for (const [text, expected] of invalid) {
    test(`${JSON.stringify(text.length > 40 ? `${text.slice(0, 40)}…` : text)} is refused, saying why`, () => assert.match(problem(text), expected));
  }

  test('formatting sorts requirements by key and set values, as Kubernetes writes selectors, and reads back the same', () => {
    const selector = parseLabelSelector('tier in (gateway,edge), app=envoy, !legacy, zone, a!=b, c==d');
    assert.equal(formatLabelSelector(selector), 'a!=b,app=envoy,c==d,!legacy,tier in (edge,gateway),zone');
    assert.equal(canonicalLabelSelector(parseLabelSelector(formatLabelSelector(selector))), canonicalLabelSelector(selector));
  });
});

describe('label selector matching (labels.Requirement.Matches)', () => {
  const cases: Array<[string, Record<string, string>, boolean]> = [
    ['app=envoy', { app: 'envoy', 'pod-template-hash': 'x' }, true],
    ['app=envoy', { app: 'nginx' }, false],
    ['app=envoy', {}, false],
    ['app==envoy', { app: 'envoy' }, true],
    // != and notin hold for a pod without the label, as in Kubernetes.
    ['app!=envoy', {}, true],
    ['app!=envoy', { app: 'nginx' }, true],
    ['app!=envoy', { app: 'envoy' }, false],
    ['tier notin (legacy,old)', {}, true],
    ['tier notin (legacy,old)', { tier: 'edge' }, true],
    ['tier notin (legacy,old)', { tier: 'old' }, false],
    ['tier in (edge,gateway)', { tier: 'gateway' }, true],
    ['tier in (edge,gateway)', { tier: 'internal' }, false],
    ['tier in (edge,gateway)', {}, false],
    ['canary', { canary: '' }, true],
    ['canary', {}, false],
    ['!legacy', {}, true],
    ['!legacy', { legacy: 'true' }, false],
    ['app=', { app: '' }, true],
    ['app=', {}, false],
    ['app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy', { 'app.kubernetes.io/name': 'envoy', 'app.kubernetes.io/component': 'proxy' }, true],
    ['app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy', { 'app.kubernetes.io/name': 'envoy' }, false],
    // A key that every object inherits is still only a label when the pod has it.
    ['constructor', {}, false],
    ['!constructor', {}, true],
    ['constructor!=x', {}, true],
  ];
  for (const [text, labels, expected] of cases) {
    test(`${text} ${expected ? 'selects' : 'does not select'} ${JSON.stringify(labels)}`, () => {
      assert.equal(matchesLabels(parseLabelSelector(text), labels), expected);
    });
  }

  test('a pod without labels is a pod with no labels', () => {
    assert.equal(matchesLabels(parseLabelSelector('!legacy'), undefined), true);
    assert.equal(matchesLabels(parseLabelSelector('app'), undefined), false);
  });
});

describe('as a webhook objectSelector', () => {
  test('equalities become matchLabels, the rest matchExpressions', () => {
    assert.deepEqual(toObjectSelector(parseLabelSelector('app=envoy')), { matchLabels: { app: 'envoy' } });
    assert.deepEqual(
      toObjectSelector(parseLabelSelector('app.kubernetes.io/name=envoy,tier in (edge,gateway),zone!=a,canary,!legacy,app.kubernetes.io/name==other')),
      {
        matchLabels: { 'app.kubernetes.io/name': 'envoy' },
        matchExpressions: [
          { key: 'tier', operator: 'In', values: ['edge', 'gateway'] },
          { key: 'zone', operator: 'NotIn', values: ['a'] },
          { key: 'canary', operator: 'Exists' },
          { key: 'legacy', operator: 'DoesNotExist' },
          // A second equality on one key cannot share matchLabels; as In it keeps its meaning (none match).
          { key: 'app.kubernetes.io/name', operator: 'In', values: ['other'] },
        ],
      },
    );
  });

  test('read back, it requires the same', () => {
    for (const text of ['app=envoy', 'a=b,c in (d,e),f notin (g),h,!i', 'x!=y,x=z']) {
      const selector = parseLabelSelector(text);
      assert.equal(canonicalLabelSelector(fromObjectSelector(toObjectSelector(selector))), canonicalLabelSelector(selector), text);
    }
  });

  test('what the API server would refuse in an objectSelector is refused', () => {
    const refused: Array<[unknown, RegExp]> = [
      [{ matchExpressions: [{ key: 'a', operator: 'In', values: [] }] }, /In needs values/],
      [{ matchExpressions: [{ key: 'a', operator: 'Exists', values: ['x'] }] }, /Exists takes no values/],
      [{ matchExpressions: [{ key: 'a', operator: 'Gt', values: ['1'] }] }, /unknown operator "Gt"/],
      [{ matchLabels: { 'a/b/c': 'x' } }, /more than one "\/"/],
      [{ matchLabels: { a: 1 } }, /not a string/],
      ['app=envoy', /is a mapping/],
    ];
    for (const [objectSelector, expected] of refused) assert.throws(() => fromObjectSelector(objectSelector), expected);
  });

  test('on generated selectors and labels, the flag and its objectSelector select exactly the same pods', () => {
    const key = fc.constantFrom('app', 'tier', 'example.com/zone', 'constructor');
    const value = fc.constantFrom('', 'envoy', 'edge', 'a');
    const requirement = fc.oneof(
      fc.tuple(key, fc.constantFrom('=', '==', '!='), value).map(([k, op, v]) => `${k}${op}${v}`),
      // "()" is refused (an empty set), so the first value is never empty; later ones may be.
      fc
        .tuple(key, fc.constantFrom('in', 'notin'), fc.constantFrom('envoy', 'a'), fc.array(value, { maxLength: 2 }))
        .map(([k, op, first, rest]) => `${k} ${op} (${[first, ...rest].join(',')})`),
      key,
      key.map((k) => `!${k}`),
    );
    const selectorText = fc.array(requirement, { minLength: 1, maxLength: 4 }).map((parts) => parts.join(','));
    const labels = fc.dictionary(key, value, { maxKeys: 4 }).map((l) => JSON.parse(JSON.stringify(l)) as Record<string, string>);
    fc.assert(
      fc.property(selectorText, labels, (text, podLabels) => {
        const selector = parseLabelSelector(text);
        // The manifests tests' own reading of an objectSelector, written separately from the parser.
        assert.equal(selects(toObjectSelector(selector), podLabels), matchesLabels(selector, podLabels), `${text} on ${JSON.stringify(podLabels)}`);
        assert.equal(matchesLabels(parseLabelSelector(formatLabelSelector(selector)), podLabels), matchesLabels(selector, podLabels));
      }),
      { numRuns: 500 },
    );
  });
});

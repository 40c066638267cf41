/**
 * Kubernetes label selectors, as `kubectl get -l` and `labels.Parse` read them (k8s.io/apimachinery
 * pkg/labels/selector.go): requirements joined by commas, all of which must hold.
 *
 *   key=value   key==value   key!=value   key in (a,b)   key notin (a,b)   key   !key
 *
 * The webhook checks every review against the selector it was started with, so it must match exactly as the
 * API server's `objectSelector` does; `toObjectSelector` writes the same selector in that form, so that a test
 * can hold the manifests to the flag. Two deliberate departures from `labels.Parse`, both refused with a reason:
 * the numeric operators `<` and `>` (an objectSelector cannot express them), and the empty selector (it
 * selects every pod: the webhook would then be asked about every pod in the namespace).
 */

export type Operator = 'in' | 'notin' | 'exists' | '!exists' | '=' | '==' | '!=';

export interface Requirement {
  readonly key: string;
  readonly operator: Operator;
  /** One value for = == !=, at least one for in and notin, none for exists and !exists. */
  readonly values: readonly string[];
}

export interface LabelSelector {
  /** In the order written. Every one must hold. */
  readonly requirements: readonly Requirement[];
}

/** A metav1.LabelSelector, the form of a webhook's objectSelector. */
export interface ObjectSelector {
  matchLabels?: Record<string, string>;
  matchExpressions?: Array<{ key: string; operator: 'In' | 'NotIn' | 'Exists' | 'DoesNotExist'; values?: string[] }>;
}

export const LABEL_SELECTOR_FORM =
  'a Kubernetes label selector: requirements joined by commas, each key=value, key!=value, key in (a,b), key notin (a,b), key or !key, e.g. app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy';

export class LabelSelectorError extends Error {
  override readonly name = 'LabelSelectorError';
}

// --- syntax of keys and values (k8s.io/apimachinery/pkg/util/validation) -------------------------------

const NAME = /^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$/;
const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const NAME_MAX = 63;
const PREFIX_MAX = 253;

/** Why `key` is not a label key (IsQualifiedName), or undefined when it is one. */
export function labelKeyProblem(key: string): string | undefined {
  const parts = key.split('/');
  if (parts.length > 2) return `label key ${JSON.stringify(key)} has more than one "/"`;
  const [prefix, name] = parts.length === 2 ? [parts[0] as string, parts[1] as string] : [undefined, parts[0] as string];
  if (prefix !== undefined) {
    if (prefix === '') return `label key ${JSON.stringify(key)} has an empty prefix before "/"`;
    if (prefix.length > PREFIX_MAX) return `the prefix of label key ${JSON.stringify(key)} is longer than ${PREFIX_MAX} characters`;
    if (!DNS_SUBDOMAIN.test(prefix)) {
      return `the prefix of label key ${JSON.stringify(key)} is not a DNS subdomain (lower-case letters, digits, "-" and ".", such as example.com)`;
    }
  }
  if (name === '') return `label key ${JSON.stringify(key)} has an empty name`;
  if (name.length > NAME_MAX) return `the name of label key ${JSON.stringify(key)} is longer than ${NAME_MAX} characters`;
  if (!NAME.test(name)) {
    return `the name of label key ${JSON.stringify(key)} must be letters, digits, "-", "_" or ".", starting and ending with a letter or digit`;
  }
  return undefined;
}

/** Why `value` is not a label value (IsValidLabelValue), or undefined when it is one. The empty value is one. */
export function labelValueProblem(value: string): string | undefined {
  if (value === '') return undefined;
  if (value.length > NAME_MAX) return `label value ${JSON.stringify(value)} is longer than ${NAME_MAX} characters`;
  if (!NAME.test(value)) {
    return `label value ${JSON.stringify(value)} must be letters, digits, "-", "_" or ".", starting and ending with a letter or digit`;
  }
  return undefined;
}

// --- lexer (labels.Lexer) --------------------------------------------------------------------------------

type TokenKind = 'identifier' | 'in' | 'notin' | '!' | '!=' | '=' | '==' | '(' | ')' | ',' | '<' | '>' | 'end';

interface Token {
  readonly kind: TokenKind;
  readonly text: string;
  /** 1-based character position, for messages. */
  readonly at: number;
}

const WHITESPACE = new Set([' ', '\t', '\r', '\n']);
const SPECIAL = new Set(['=', '!', '(', ')', ',', '>', '<']);
const SYMBOLS: readonly TokenKind[] = ['!=', '==', '!', '=', '(', ')', ',', '<', '>'];

function tokenize(text: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const ch = text[i] as string;
    if (WHITESPACE.has(ch)) {
      i += 1;
      continue;
    }
    if (SPECIAL.has(ch)) {
      // Longest match first: "!=" before "!", "==" before "=".
      const symbol = SYMBOLS.find((candidate) => text.startsWith(candidate, i)) as TokenKind;
      tokens.push({ kind: symbol, text: symbol, at: i + 1 });
      i += symbol.length;
      continue;
    }
    const start = i;
    while (i < text.length && !WHITESPACE.has(text[i] as string) && !SPECIAL.has(text[i] as string)) i += 1;
    const word = text.slice(start, i);
    tokens.push({ kind: word === 'in' || word === 'notin' ? word : 'identifier', text: word, at: start + 1 });
  }
  tokens.push({ kind: 'end', text: '', at: text.length + 1 });
  return tokens;
}

// --- parser (labels.Parser) ------------------------------------------------------------------------------

/** "it has "," at character 5 where a label key belongs": messages read on from "…is not valid; expected <form>, but". */
function misplaced(token: Token, what: string): string {
  return token.kind === 'end' ? `it ends where ${what} belongs` : `it has ${JSON.stringify(token.text)} at character ${token.at} where ${what} belongs`;
}

class Parser {
  private position = 0;

  constructor(private readonly tokens: readonly Token[]) {}

  private peek(): Token {
    return this.tokens[this.position] as Token;
  }

  private next(): Token {
    const token = this.peek();
    if (token.kind !== 'end') this.position += 1;
    return token;
  }

  parse(): Requirement[] {
    const requirements: Requirement[] = [];
    if (this.peek().kind === 'end') {
      throw new LabelSelectorError('it is empty, which would select every pod; give at least one requirement, such as app=envoy');
    }
    for (;;) {
      const start = this.peek();
      if (start.kind !== 'identifier' && start.kind !== '!') {
        throw new LabelSelectorError(misplaced(start, requirements.length === 0 ? 'a label key or "!"' : 'a label key or "!" after ","'));
      }
      requirements.push(this.requirement());
      const after = this.next();
      if (after.kind === 'end') return requirements;
      if (after.kind !== ',') throw new LabelSelectorError(misplaced(after, '"," or the end'));
    }
  }

  private requirement(): Requirement {
    const negated = this.peek().kind === '!';
    if (negated) this.next();
    const keyToken = this.next();
    if (keyToken.kind !== 'identifier') throw new LabelSelectorError(misplaced(keyToken, negated ? 'a label key after "!"' : 'a label key'));
    const key = keyToken.text;
    const keyProblem = labelKeyProblem(key);
    if (keyProblem !== undefined) throw new LabelSelectorError(keyProblem);
    if (negated) return { key, operator: '!exists', values: [] };

    const operator = this.peek();
    switch (operator.kind) {
      case 'end':
      case ',':
        return { key, operator: 'exists', values: [] };
      case '=':
      case '==':
      case '!=':
        this.next();
        return { key, operator: operator.kind, values: [this.exactValue(key)] };
      case 'in':
      case 'notin':
        this.next();
        return { key, operator: operator.kind, values: this.valueSet(key, operator.kind) };
      case '<':
      case '>':
        throw new LabelSelectorError(
          `the operator ${JSON.stringify(operator.kind)} at character ${operator.at} cannot be written in a webhook's objectSelector (use =, !=, in, notin, key or !key)`,
        );
      default:
        throw new LabelSelectorError(misplaced(operator, `one of =, ==, !=, in, notin, "," or the end after ${JSON.stringify(key)}`));
    }
  }

  /** After = == !=: a value, or nothing (the empty value) when the requirement ends there. */
  private exactValue(key: string): string {
    const token = this.peek();
    if (token.kind === 'end' || token.kind === ',') return '';
    // "in" and "notin" are valid label values; only their place makes them keywords.
    if (token.kind !== 'identifier' && token.kind !== 'in' && token.kind !== 'notin') {
      throw new LabelSelectorError(misplaced(token, `a value for ${JSON.stringify(key)}`));
    }
    this.next();
    return checkedValue(token.text);
  }

  /** After in / notin: "(" values separated by commas ")"; an empty item is the empty value, as in Kubernetes. */
  private valueSet(key: string, operator: 'in' | 'notin'): string[] {
    const open = this.next();
    if (open.kind !== '(') {
      const found = open.kind === 'end' ? 'it ends there' : `it has ${JSON.stringify(open.text)} at character ${open.at} instead`;
      throw new LabelSelectorError(`"${operator}" must be followed by values in parentheses, such as ${key} ${operator} (a,b); ${found}`);
    }
    const values: string[] = [];
    if (this.peek().kind === ')') {
      throw new LabelSelectorError(`the values of "${key} ${operator}" are empty; give at least one`);
    }
    for (;;) {
      const token = this.peek();
      if (token.kind === ',' || token.kind === ')') {
        values.push('');
      } else if (token.kind === 'identifier' || token.kind === 'in' || token.kind === 'notin') {
        this.next();
        values.push(checkedValue(token.text));
      } else {
        throw new LabelSelectorError(misplaced(token, `a value, "," or ")" in the values of "${key} ${operator}"`));
      }
      const separator = this.next();
      if (separator.kind === ')') return [...new Set(values)];
      if (separator.kind !== ',') throw new LabelSelectorError(misplaced(separator, `"," or ")" in the values of "${key} ${operator}"`));
    }
  }
}

function checkedValue(value: string): string {
  const problem = labelValueProblem(value);
  if (problem !== undefined) throw new LabelSelectorError(problem);
  return value;
}

/** Parses a selector; throws LabelSelectorError saying what is wrong and where. */
export function parseLabelSelector(text: string): LabelSelector {
  return { requirements: new Parser(tokenize(text)).parse() };
}

/** The problem with `text` as a selector, or undefined when it parses. */
export function labelSelectorProblem(text: string): string | undefined {
  try {
    parseLabelSelector(text);
    return undefined;
  } catch (error) {
    if (error instanceof LabelSelectorError) return error.message;
    throw error;
  }
}

// --- meaning ---------------------------------------------------------------------------------------------

/**
 * Whether a pod with these labels is selected (labels.Requirement.Matches). `!=` and `notin` hold for a pod
 * without the label at all, as in Kubernetes.
 */
export function matchesLabels(selector: LabelSelector, labels: Readonly<Record<string, string>> | undefined): boolean {
  const all = labels ?? {};
  return selector.requirements.every(({ key, operator, values }) => {
    // Own keys only: a label key may be "constructor", which every object inherits.
    const has = Object.hasOwn(all, key);
    const value = has ? all[key] : undefined;
    switch (operator) {
      case 'exists':
        return has;
      case '!exists':
        return !has;
      case '=':
      case '==':
      case 'in':
        return has && values.includes(value as string);
      case '!=':
      case 'notin':
        return !has || !values.includes(value as string);
    }
  });
}

/** The selector as written by Kubernetes (requirements sorted by key, set values sorted). */
export function formatLabelSelector(selector: LabelSelector): string {
  return [...selector.requirements]
    .sort((a, b) => compare(a.key, b.key))
    .map(({ key, operator, values }) => {
      switch (operator) {
        case 'exists':
          return key;
        case '!exists':
          return `!${key}`;
        case 'in':
        case 'notin':
          return `${key} ${operator} (${[...values].sort(compare).join(',')})`;
        default:
          return `${key}${operator}${values[0] ?? ''}`;
      }
    })
    .join(',');
}

/**
 * The same selector as a webhook's objectSelector: equalities as matchLabels (one per key; a second
 * equality on the same key goes to matchExpressions, where it keeps its meaning), the rest as expressions.
 */
export function toObjectSelector(selector: LabelSelector): ObjectSelector {
  const matchLabels: Record<string, string> = {};
  const matchExpressions: NonNullable<ObjectSelector['matchExpressions']> = [];
  for (const { key, operator, values } of selector.requirements) {
    if ((operator === '=' || operator === '==') && !Object.hasOwn(matchLabels, key)) {
      matchLabels[key] = values[0] ?? '';
      continue;
    }
    switch (operator) {
      case 'exists':
        matchExpressions.push({ key, operator: 'Exists' });
        break;
      case '!exists':
        matchExpressions.push({ key, operator: 'DoesNotExist' });
        break;
      case '=':
      case '==':
      case 'in':
        matchExpressions.push({ key, operator: 'In', values: [...values] });
        break;
      case '!=':
      case 'notin':
        matchExpressions.push({ key, operator: 'NotIn', values: [...values] });
        break;
    }
  }
  return {
    ...(Object.keys(matchLabels).length > 0 ? { matchLabels } : {}),
    ...(matchExpressions.length > 0 ? { matchExpressions } : {}),
  };
}

/**
 * An objectSelector read back as requirements (metav1.LabelSelectorAsSelector); throws LabelSelectorError
 * naming what the API server would refuse (an unknown operator, In without values, a bad key or value).
 */
export function fromObjectSelector(objectSelector: unknown): LabelSelector {
  if (!isRecord(objectSelector)) throw new LabelSelectorError('an objectSelector is a mapping');
  const requirements: Requirement[] = [];
  const { matchLabels = {}, matchExpressions = [] } = objectSelector;
  if (!isRecord(matchLabels)) throw new LabelSelectorError('matchLabels is a mapping of keys to values');
  for (const [key, value] of Object.entries(matchLabels)) {
    if (typeof value !== 'string') throw new LabelSelectorError(`matchLabels ${JSON.stringify(key)}: the value is not a string`);
    requirements.push({ key: checkedKey(key), operator: '=', values: [checkedValue(value)] });
  }
  if (!Array.isArray(matchExpressions)) throw new LabelSelectorError('matchExpressions is a list');
  for (const expression of matchExpressions as unknown[]) {
    if (!isRecord(expression) || typeof expression.key !== 'string') throw new LabelSelectorError('a matchExpression needs a string key');
    const key = checkedKey(expression.key);
    const values = expression.values ?? [];
    if (!Array.isArray(values) || values.some((value) => typeof value !== 'string')) {
      throw new LabelSelectorError(`matchExpression ${JSON.stringify(key)}: values is a list of strings`);
    }
    const strings = (values as string[]).map(checkedValue);
    switch (expression.operator) {
      case 'In':
      case 'NotIn':
        if (strings.length === 0) throw new LabelSelectorError(`matchExpression ${JSON.stringify(key)}: ${expression.operator} needs values`);
        requirements.push({ key, operator: expression.operator === 'In' ? 'in' : 'notin', values: [...new Set(strings)] });
        break;
      case 'Exists':
      case 'DoesNotExist':
        if (strings.length > 0) throw new LabelSelectorError(`matchExpression ${JSON.stringify(key)}: ${expression.operator} takes no values`);
        requirements.push({ key, operator: expression.operator === 'Exists' ? 'exists' : '!exists', values: [] });
        break;
      default:
        throw new LabelSelectorError(`matchExpression ${JSON.stringify(key)}: unknown operator ${JSON.stringify(expression.operator)}`);
    }
  }
  return { requirements };
}

/**
 * A canonical spelling, equal for two selectors that are written differently but require the same: `=` and
 * `==` as `in` of one value, `!=` as `notin` of one value, values sorted, requirements sorted and deduplicated.
 */
export function canonicalLabelSelector(selector: LabelSelector): string {
  const parts = selector.requirements.map(({ key, operator, values }) => {
    const normalized = operator === '=' || operator === '==' ? 'in' : operator === '!=' ? 'notin' : operator;
    return JSON.stringify([key, normalized, [...new Set(values)].sort(compare)]);
  });
  return [...new Set(parts)].sort(compare).join('\n');
}

function checkedKey(key: string): string {
  const problem = labelKeyProblem(key);
  if (problem !== undefined) throw new LabelSelectorError(problem);
  return key;
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

/** Byte order, as Go's sort.Strings: not the locale's. */
function compare(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
